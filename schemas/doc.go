// Package schemas embeds sagad's JSON Schemas (draft 2020-12) and validates
// documents against them. There is one schema per document the daemon reads or
// writes, each named after its file:
//
//   - capsule.schema.json: the capsule a producer publishes (PIPELINE §2),
//     checked by RECEPTION;
//   - checkpoint.schema.json: the per-capsule checkpoint in KV (PIPELINE §5);
//   - artifact.schema.json, review.schema.json: what executors and reviewers
//     answer;
//   - continuation.schema.json: why and where a capsule paused.
//
// The capsule schema checks shape only. Whatever a later phase reports with a
// reason of its own (budget positivity, cycle limits, a missing reviewer, the
// definition-of-ready fields, path safety) is deliberately left loose here, so
// that the capsule reaches the phase that names the problem precisely. The
// record schemas mirror the Go types of package capsule field for field; the
// tests hold them together.
//
// [Validate] compiles every schema once, asserts "format" (date-time and the
// like) and is safe for concurrent use. Input that is not JSON yields an error
// wrapping [ErrNotJSON] (halt reason not_json); a document that violates its
// schema yields a [*ValidationError] whose Pointers are the halt detail of
// schema_invalid. A missing required member or an unknown member is reported at
// that member's own pointer ("/capsule_id"), not at its parent object.
//
// RECEPTION validates every capsule, so the capsule schema also has a checker
// of its own, compiled from the same file (fast.go): it decides "valid"
// without allocating and leaves every other verdict, and every finding, to
// the library. FuzzFastAgrees holds the two together. A number whose
// exponent math/big cannot hold ("tokens": 1e2000000), on which the library
// would panic, is reported at its pointer as "number out of range", in every
// schema, wherever the library reads it; in a capsule, so is one whose
// exponent is past 400 (maxReadExponent: slow to read, and beyond any
// number sagad decodes), and in a composition or chain document any such
// number at all, wherever it is (they have no checker of their own to say
// where the library reads).
package schemas
