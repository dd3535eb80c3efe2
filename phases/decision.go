package phases

import "github.com/sagad/sagad/machine"

// Decision is a phase's verdict on one capsule; the machine applies it
// (machine.Decision).
type Decision = machine.Decision

// Record is the data a phase's work adds to the checkpoint (machine.Record).
type Record = machine.Record

// Action is what a phase decided (machine.Action).
type Action = machine.Action

// Actions a phase can decide (see machine.Action).
const (
	Advance  = machine.Advance
	LoopBack = machine.LoopBack
	Halt     = machine.Halt
	Retry    = machine.Retry
	Park     = machine.Park
)

// ParkWith returns a Park decision.
var ParkWith = machine.ParkWith

// AdvanceWith returns an Advance decision carrying findings.
var AdvanceWith = machine.AdvanceWith

// HaltWith returns a Halt decision.
var HaltWith = machine.HaltWith

// RetryAfter returns a Retry decision.
var RetryAfter = machine.RetryAfter

// RetryLater returns a Retry decision redelivered after the runner's retry
// delay: a transient failure with no delay of its own.
var RetryLater = machine.RetryLater
