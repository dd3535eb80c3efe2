// Package pipeline owns sagad's JetStream topology and the generic phase
// runner: one work-queue stream and one durable pull consumer per phase, the
// checkpoint, capsule and artifact stores, the lifecycle event stream and the
// outcome stream.
//
// # Names
//
//	what                      name                  subjects / keys
//	intake (phase 0)          stream SAGA_INTAKE    saga.intake            (anyone publishes capsules here)
//	phase N, 1 ≤ N ≤ 6        stream SAGA_PHASE_N   saga.phase.N
//	phase consumers           durable "phase-N"     (phase 0: "phase-0" on SAGA_INTAKE)
//	events without transition stream SAGA_EVENTS    saga.events.<key>      (pauses, operator actions, duplicates)
//	outcomes                  stream SAGA_OUTCOMES  saga.outcome.completed|halted|cancelled (original bytes kept)
//	checkpoints               KV SAGA_CHECKPOINTS   <key>
//	capsules as received      KV SAGA_CAPSULES      <key>
//	locks, budgets            KV SAGA_LOCKS, SAGA_BUDGETS (packages locks, budget)
//	artifacts                 object store SAGA_ARTIFACTS  <capsule_id>/<cycle>, ref "artifact:<capsule_id>/<cycle>"
//
// The key of a capsule is its capsule_id. Bytes that cannot be read as a
// capsule with a usable id (not JSON, schema-invalid, oversized, unknown
// version), and a second capsule that reuses an id with different content,
// get the key "x-<intake sequence>" so they are still checkpointed, listed
// and kept.
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
