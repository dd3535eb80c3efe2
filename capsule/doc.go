// Package capsule is sagad's shared vocabulary: the capsule document, the seven
// phases, capsule states, typed halt reasons, rule findings, usage and the
// checkpoint model. It imports nothing else of this module, so every other
// package (rules, phases, pipeline, the CLI) can speak it without cycles.
//
// The integrity digest of a capsule is the SHA-256 of the RFC 8785 (JCS)
// canonical form of the capsule without its "integrity" member; see [Digest].
package capsule
