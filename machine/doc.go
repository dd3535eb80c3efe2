// Package machine is the saga's state machine: the one pure function,
// [Apply], through which every change to a capsule's checkpoint goes — phase
// decisions, claims, pauses, resumes, cancels, operator decisions,
// completions, timeouts and sweeps — and the plan of effects ([EffectsOf])
// that a stored checkpoint calls for.
//
// Apply takes a checkpoint, an [Event] and the time, and returns the changed
// copy with the transition it recorded, or a typed [*Refusal] that says why
// the event does not apply to that checkpoint (stale, claim held or lost,
// refused by the capsule's state, invalid). It does no I/O: the caller
// writes the result with a compare-and-set on the checkpoint's revision, and
// on a conflict reads the checkpoint again and applies the same event again,
// so every precondition is checked against the checkpoint actually written.
// Effects are derived from the stored checkpoint, never from the event, so
// a redelivery or a crash between the write and the effects re-emits exactly
// what the first attempt would have.
package machine
