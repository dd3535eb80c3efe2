//go:build !race

package store

// raceChecks: see checkEncoding.
const raceChecks = false
