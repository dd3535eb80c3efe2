// Package maintenance holds sagad's maintenance services, each small, with
// its own config and tests: the [Sweeper] that looks after parked capsules
// (lock contention, overdue external work) and the [Completions] ingestor
// of accepted external work's results.
package maintenance
