//go:build race

package store

// Under the race detector (the tests of every package), every checkpoint
// written with a kept history is held to its full encoding.
func init() { checkKept.Store(true) }
