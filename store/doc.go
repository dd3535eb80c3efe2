// Package store is sagad's JetStream store and the only owner of its names:
// every stream, subject, consumer, bucket and header the saga uses, the
// checkpoint, continuation, capsule-bytes and artifact stores, and the writes
// that carry out a checkpoint's effects ([Store.Emit]: next-phase message,
// outcome, continuation, lock release).
//
// It is also the one owner of two formats and one write: the phase message
// ([EncodePhaseMsg], [DecodePhaseMsg]: a pointer to the checkpoint, the
// capsule key, cycle and resume token in headers, no body), and every change
// of a written checkpoint ([Store.Apply]: the machine applies an event, the
// result is written by compare-and-set under cas.Retry).
//
// # Names
//
//	what                      name                  subjects / keys
//	intake (phase 0)          stream SAGA_INTAKE    saga.intake            (sagad's own account)
//	                                                saga.intake.<producer> (a producer account's saga.intake; quota per subject)
//	phase N, 1 ≤ N ≤ 6        stream SAGA_PHASE_N   saga.phase.N
//	phase consumers           durable "phase-N"     (phase 0: "phase-0" on SAGA_INTAKE)
//	events without transition stream SAGA_EVENTS    saga.events.<key>      (pauses, operator actions, duplicates)
//	outcomes                  stream SAGA_OUTCOMES  saga.outcome.completed|halted|cancelled (original bytes kept)
//	checkpoints               KV SAGA_CHECKPOINTS   <key>
//	capsules as received      KV SAGA_CAPSULES      <key>
//	locks, budgets            KV SAGA_LOCKS, SAGA_BUDGETS (packages locks, budget)
//	compositions              KV SAGA_CHAINS        <sha256(chain_id)[:20] hex>.<producer or "-"> (package compose)
//	artifacts                 KV SAGA_ARTIFACT_RECORDS     <capsule_id>/<cycle>, ref "artifact:<capsule_id>/<cycle>" (a record up to 128 KiB)
//	                          object store SAGA_ARTIFACTS  <capsule_id>/<cycle> (a larger one, or one an older sagad wrote)
//
// The key of a capsule is its capsule_id. Bytes that cannot be read as a
// capsule with a usable id (not JSON, schema-invalid, oversized, unknown
// version), and a second capsule that reuses an id with different content,
// get the key "x-<intake sequence>" so they are still checkpointed, listed
// and kept.
//
// Emitting twice is harmless: a second phase message finds its transition
// recorded, events carry a deterministic id that readers de-duplicate by,
// and the outcome carries a Nats-Msg-Id and is sent only until the capsule's
// kept bytes record that it was acknowledged.
package store
