// Package phases holds the seven saga phases, one file each. A phase looks at
// a capsule and its last checkpoint and returns a [Decision]: advance, loop
// back to EXECUTION, halt with a typed reason, or retry later. It never acks,
// publishes or writes the checkpoint itself — package pipeline maps every
// decision to a compare-and-set on the checkpoint and to JetStream delivery, in
// one place, which is what keeps each transition idempotent.
//
// Side effects a phase does make (taking locks, charging budgets, running an
// executor) go through [Env] and are themselves idempotent, keyed by capsule
// and cycle, so a redelivered message repeats none of them.
//
// EXECUTION's executor and REVIEW's reviewer are called under one failure
// policy (policy.go, docs/FAILURES.md "Failure policy"): a failed attempt is charged
// under its own id, judged, recorded before the next call, then halts,
// pauses or is called again, in that order in both phases.
package phases
