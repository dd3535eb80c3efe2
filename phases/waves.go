package phases

import (
	"context"
	"fmt"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
)

// WaveAdmission reserves a wave capsule's caps in its wave (budget.Tracker
// implements it). Reserve must be idempotent per holder: AUTOMATED_GATES
// may run again for the same capsule after a crash or a redelivery.
type WaveAdmission interface {
	ReserveFor(ctx context.Context, waveID, holder, producer string, caps capsule.Budget) (budget.Admission, error)
}

// admitToWave is the last step of AUTOMATED_GATES for a capsule of a wave,
// once every rule passed and before anything is spent: its caps (raised by
// any override) are reserved against what the wave has left, and next goes
// on recording the reservation in the checkpoint. A capsule that does not
// fit waits (state waiting, trigger wave_capacity) until the sweeper finds
// room for it; one whose wave was closed halts with wave_closed:<wave>, one
// whose producer the wave does not admit with wave_not_admitted:<wave>.
func admitToWave(ctx context.Context, env *Env, in *Input, next Decision) Decision {
	c := in.Capsule
	if c.WaveID == "" || env.Waves == nil {
		return next
	}
	if in.Checkpoint == nil {
		return RetryLater(fmt.Errorf("automated gates: wave %s: no checkpoint to reserve for", c.WaveID))
	}
	// The holder is the checkpoint key: the same for every delivery of
	// this capsule, so a repeated admission finds its reservation.
	caps := in.Checkpoint.State.Caps(c.Budget)
	a, err := env.Waves.ReserveFor(ctx, c.WaveID, in.Key(), in.Checkpoint.Producer, caps)
	if err != nil {
		return RetryLater(fmt.Errorf("automated gates: wave %s: %w", c.WaveID, err))
	}
	switch {
	case a.Admitted:
		reserved := capsule.Usage{Tokens: caps.Tokens, Dollars: caps.Dollars}
		if next.Record == nil {
			next.Record = &Record{}
		}
		next.Record.WaveReserved = &reserved
		return next
	case a.NotAdmitted:
		return HaltWith(capsule.WaveNotAdmitted(c.WaveID), capsule.Finding{
			Field: "wave_id", Message: fmt.Sprintf("wave %q admits other producers than %q (sagactl wave set --producers)", c.WaveID, in.Checkpoint.Producer),
		})
	case a.Closed:
		return HaltWith(capsule.WaveClosed(c.WaveID), capsule.Finding{
			Rule: 19, Field: "wave_id", Message: fmt.Sprintf("wave %q was closed before the capsule was admitted", c.WaveID),
		})
	}
	trigger := capsule.TriggerWaveCapacity
	if !a.Wave.CouldFit(caps) {
		// No capsule ending makes room: a person must raise the cap (or
		// cancel), so it is in pending and the console's inbox.
		trigger = capsule.TriggerWaveTooSmall
	}
	reason := WaveWaitReason(c.WaveID, a.Wave, caps)
	if trigger == capsule.TriggerWaveTooSmall {
		reason += fmt.Sprintf(", more than the wave's whole cap: raise it (sagactl wave set %s) or cancel the capsule", c.WaveID)
	}
	return Decision{Action: Park, Trigger: trigger, WaitFor: []string{c.WaveID}, Reason: reason}
}

// WaveWaitReason says why a capsule with caps waits for wave w.
func WaveWaitReason(waveID string, w budget.Wave, caps capsule.Budget) string {
	tokens, dollars := w.Left()
	s := fmt.Sprintf("wave %s has", waveID)
	if tokens >= 0 {
		s += fmt.Sprintf(" %d of %d tokens", tokens, w.TokensCap)
	}
	if dollars >= 0 {
		if tokens >= 0 {
			s += " and"
		}
		s += fmt.Sprintf(" %g of %g dollars", dollars, w.DollarsCap)
	}
	return s + fmt.Sprintf(" left; the capsule needs %d tokens and %g dollars", caps.Tokens, caps.Dollars)
}
