// Package costs sums what capsules spent, from their checkpoints: tokens
// and dollars per wave, chain, producer, task kind or day, the share spent
// by runs that bought no result (halted or cancelled capsules), and the
// wave reservations running capsules still hold.
//
// The checkpoint is the only source: each holds the capsule's whole spend
// (state.budget_used, failed attempts' charges included, Rule 16), its wave,
// producer and chain, and what AUTOMATED_GATES reserved of its wave. A
// capsule's task kind lives in its kept bytes, which the caller passes in.
package costs
