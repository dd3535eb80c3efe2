// Package capsule is sagad's shared vocabulary: the capsule document, the seven
// phases, capsule states, typed halt reasons, pause and wait triggers, rule
// findings, usage and the checkpoint model. It imports nothing else of this
// module, so every other package (rules, phases, pipeline, the CLI) can speak
// it without cycles.
//
// The integrity digest of a capsule is the SHA-256 of the RFC 8785 (JCS)
// canonical form of the capsule without its "integrity" member; see [Digest].
//
// # Triggers are data
//
// Every pause and wait trigger is a row of [TriggerTable]: the state it puts
// a capsule in, whether it fires once, who resumes it (a person or the
// sweeper, and what the sweeper watches), the event it emits, whether a
// continuation is kept, its metric label, why an operator's pause is refused,
// and a one-line description. The machine, admin's pending list, the console,
// the sweeper, the emitter and the metrics read the row; none compares
// trigger names. To add a trigger:
//
//  1. declare its constant in triggers.go and add its row to [TriggerTable];
//  2. run go test ./capsule ./schemas: they ask for its value in the enums
//     of schemas/checkpoint.schema.json (every trigger),
//     schemas/continuation.schema.json (continuation kept),
//     schemas/admin/pending-reply.schema.json (a state a person resumes) or
//     schemas/admin/status-reply.schema.json's waiting_on (state waiting),
//     and print the trigger table of docs/CAPSULES.md to paste;
//  3. fire it: a phase returns a Park decision with it (machine.ParkWith),
//     or an admin action parks with it.
//
// Only a new way for the sweeper to resume (a new [Watch]) needs code in the
// sweeper (package maintenance).
package capsule
