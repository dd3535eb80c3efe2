// Package budget enforces the budgets of Rule 16: every executor and reviewer
// call reports its usage, which is added to the capsule's total and, when the
// capsule belongs to a wave, to the wave's total; crossing a cap halts the
// capsule with budget_exceeded:<reason>.
//
// [Check] and [Fraction] are the pure comparisons. A [Tracker] keeps the
// running totals where every sagad process sees them.
//
// # Storage
//
// Totals live in one JetStream KV bucket (SAGA_BUDGETS by default, history 1)
// under two kinds of key:
//
//	capsule.<capsule_id>   one capsule's usage and caps
//	wave.<wave_id>         a wave's usage, summed over its capsules, and caps
//
// Ids must be valid KV key text ([-/_=.a-zA-Z0-9], no leading, trailing or
// double dot); the UUIDs and ULIDs of the capsule schema are. Each value is JSON:
//
//	{"tokens_cap": 1000, "dollars_cap": 2.5, "used": {"tokens": 120, "dollars": 0.3},
//	 "closed": false, "applied": ["<charge id>", ...]}
//
// A wave's record also holds its reservations (see wave.go):
//
//	"reserved": {"tokens": 2000, "dollars": 1.0},
//	"holds": {"<capsule key>": {"tokens": 1000, "dollars": 0.5}, ...}
//
// A cap of 0 means no cap. A capsule record's caps are those of the capsule,
// rewritten by every charge; a wave's are set by [Tracker.SetWave] or
// [Tracker.ChangeWave] (sagactl wave set; a wave charged before it was set
// has no caps). closed marks a wave that takes no new capsules (Rule 19, and
// wave_closed for those waiting for its capacity); charges to it are still
// recorded.
//
// # Wave admission
//
// AUTOMATED_GATES reserves a wave capsule's caps ([Tracker.Reserve]) before
// anything is spent: a capsule whose caps do not fit in cap − used −
// reserved waits. Each charge moves what the capsule used from its
// reservation to the wave's total, and its end releases the rest
// ([Tracker.Release]).
//
// # Atomicity and idempotency
//
// Every write is a compare-and-set on the key's revision, retried when another
// writer got in between, so concurrent charges from any number of processes
// add up exactly. A charge carries an id ("<capsule>/<cycle>/exec", say); each
// record keeps the last 32 ids applied to it and skips a charge it already
// has, so a redelivered message does not count twice.
//
// A charge writes the wave first and the capsule second. A capsule record that
// has the charge id therefore proves the wave has it too, and a replayed charge
// stops there. Only a crash between the two writes followed by a replay after
// 32 other charges to the same wave could count the wave twice; a lost wave
// charge cannot happen.
package budget
