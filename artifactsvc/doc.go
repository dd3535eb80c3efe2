// Package artifactsvc serves saga.artifacts.get: a worker fetches, by
// reference, exactly the artifacts its current call names (a revision's
// prior artifact, the context artifacts, the artifact under review), with
// that call's token. A request and answer are small JSON documents; an
// artifact larger than one NATS message is read in pages (offset, limit),
// each answer carrying the artifact's total size and sha256.
//
// Grants live in the memory of the sagad that made the call, keyed by the
// SHA-256 of the call's token (the token itself is never kept). Every sagad
// hears every request (no queue group): the one whose phase runs the call
// answers at once; the others refuse a token they do not know only after
// Config.NotMineDelay, and the requester takes the first answer.
package artifactsvc
