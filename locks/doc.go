// Package locks implements the resource locks of Rule 17: EXECUTION takes a
// lock on every path in constraints.resource_locks_required before the
// executor runs, all or nothing, and releases them afterwards whatever the
// outcome; RECEPTION asks whether they are available.
//
// # Storage
//
// Locks live in one JetStream KV bucket (SAGA_LOCKS by default, history 1),
// one key per path. A path is any non-empty string, compared exactly (no
// cleaning or case folding: "src/a" and "src/a/" are different locks). Its key
// is the lowercase hex SHA-256 of the path: always a valid KV key (KV keys
// allow only [-/_=.a-zA-Z0-9]), fixed length whatever the path, and
// collision-free in practice; see [Key]. The value is JSON:
//
//	{"path": "src/a", "holder": "<capsule id>", "owner": "<sagad instance>",
//	 "acquired_at": "<RFC 3339>", "expires_at": "<RFC 3339>"}
//
// The holder is the capsule, not the process: a redelivered capsule, on this
// process or another one, re-acquires its own lock instead of being refused by
// it. The owner records which sagad instance wrote the lease last, for
// operators.
//
// # Safety across processes
//
// Every write is a compare-and-set on the key's revision: Create when the key
// is absent or deleted, Update with the revision read otherwise, Delete with
// [jetstream.LastRevision]. Of two processes racing for the same lock exactly
// one write succeeds; the loser reads the lock again and sees the winner.
//
// A lock is a lease: it expires at expires_at unless renewed ([Manager.Renew]),
// so no lock outlives a crashed holder for longer than the lease. An expired
// lock is taken over by compare-and-set like any other write. Leases compare
// wall clocks of different machines, so keep clock skew well below the lease.
//
// Release writes a delete marker, which stays in the bucket (one small
// message per path ever locked) until the bucket's delete markers are purged.
package locks
