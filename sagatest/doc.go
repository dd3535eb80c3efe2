// Package sagatest is the fixture the tests of sagad's packages share: a
// real embedded JetStream (internal/natstest) with sagad's topology made by
// [store.Ensure], the [store.Store] on it, a client, a logger that writes to
// t.Log, and, when a test needs capsules to move, a running pipeline with
// stub executors.
//
// [Setup] returns the bundle without a pipeline (store, admin and client
// tests drive the topology themselves); [Run] starts a pipeline too. Each
// test gets its own server, so tests run in parallel.
//
// Only tests import it. It imports the pipeline, so a package the pipeline
// imports reaches it from an external test package (package x_test).
package sagatest
