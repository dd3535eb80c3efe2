// Package pipeline is the phase runner: one durable consumer per phase (see
// package store for the names), each message handled by its phase (package
// phases), the phase's decision applied to the checkpoint through the state
// machine (package machine) with a compare-and-set, and the effects the new
// checkpoint calls for emitted (store.Store.Emit). It also starts the
// maintenance services (package maintenance).
//
// # Exactly once
//
// Every transition is a compare-and-set of the capsule's checkpoint on its KV
// revision. Only the winner emits the transition's effects (next-phase
// message, outcome, lock release). A transition's lifecycle events are not
// published: they are derived from the phase history of the checkpoint that
// records it (CheckpointEvents), so a hop costs two writes like a bare
// relay's, the checkpoint and the next message; Client.History and `sagactl
// watch` merge them with the events stream, which carries what changes no
// history (pauses, resumes, operator decisions, duplicates). A message whose transition is already
// recorded (a redelivery, a duplicate, a crash after the write) only re-emits
// that transition's effects and is acked. Re-emitting is harmless: a second
// phase message finds its transition recorded, events carry a deterministic
// id that readers de-duplicate by, and the outcome carries a Nats-Msg-Id and
// is sent only until the checkpoint records that it was acknowledged. EXECUTION and
// REVIEW take a leased claim in the checkpoint before calling an agent, so two
// deliveries never call it twice for one (capsule, cycle).
package pipeline
