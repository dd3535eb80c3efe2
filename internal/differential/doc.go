// Package differential holds every fast path to the routine it replaces
// with one harness, the way one driver test suite is run against every
// driver: a hand-written encoder, decoder, scanner or matcher registers a
// [Pair] (its name, the fast routine, the reference, how their results
// compare, a seed corpus and a generator), and the same driver runs every
// pair over its corpora in a table test ([Run]) and as a fuzz target
// ([Fuzz]).
//
// Pairs live in the test files of the package whose fast path they hold
// (the routines are often unexported); each such package keeps its pairs
// in one registry ([Registry]), runs them all from one test, and has one
// FuzzXxx function per pair that only calls [Fuzz]. CI runs each of those
// fuzz targets for a bounded time (.ci/run, CI_FUZZTIME); CONTRIBUTING.md
// says how to add a fast path.
package differential
