package phases_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
)

// fakeWaves answers Reserve as scripted and records the calls.
type fakeWaves struct {
	admission budget.Admission
	err       error
	calls     []string // holder/wave
	producers []string
	caps      []capsule.Budget
}

func (w *fakeWaves) ReserveFor(_ context.Context, waveID, holder, producer string, caps capsule.Budget) (budget.Admission, error) {
	w.calls = append(w.calls, holder+"/"+waveID)
	w.producers = append(w.producers, producer)
	w.caps = append(w.caps, caps)
	return w.admission, w.err
}

// TestAdmitToWave: after the rules pass, AUTOMATED_GATES reserves a wave
// capsule's caps (raised by overrides): admitted, it advances recording the
// reservation; without room it waits (wave_capacity, the wave as WaitFor; wave_too_small
// when its caps exceed the whole cap);
// a closed wave halts it wave_closed:<wave>; a failed reservation is
// retried; a capsule outside any wave reserves nothing.
func TestAdmitToWave(t *testing.T) {
	t.Parallel()
	full := budget.Wave{TokensCap: 30000, Reserved: capsule.Usage{Tokens: 30000}}
	small := budget.Wave{TokensCap: 3000}
	tests := []struct {
		name      string
		wave      string
		admission budget.Admission
		err       error
		override  int64
		want      phases.Action
		check     func(t *testing.T, d phases.Decision)
	}{
		{name: "admitted", wave: "w", admission: budget.Admission{Admitted: true}, want: phases.Advance,
			check: func(t *testing.T, d phases.Decision) {
				require.Equal(t, &capsule.Usage{Tokens: 10000, Dollars: 5}, d.Record.WaveReserved)
			}},
		{name: "admitted with raised caps", wave: "w", admission: budget.Admission{Admitted: true}, override: 20000, want: phases.Advance,
			check: func(t *testing.T, d phases.Decision) {
				require.Equal(t, &capsule.Usage{Tokens: 20000, Dollars: 5}, d.Record.WaveReserved)
			}},
		{name: "no room", wave: "w", admission: budget.Admission{Wave: full}, want: phases.Park,
			check: func(t *testing.T, d phases.Decision) {
				require.Equal(t, capsule.TriggerWaveCapacity, d.Trigger)
				require.Equal(t, []string{"w"}, d.WaitFor)
				require.Equal(t, "wave w has 0 of 30000 tokens left; the capsule needs 10000 tokens and 5 dollars", d.Reason)
				require.Nil(t, d.Record)
			}},
		{name: "bigger than the whole cap", wave: "w", admission: budget.Admission{Wave: small}, want: phases.Park,
			check: func(t *testing.T, d phases.Decision) {
				require.Equal(t, capsule.TriggerWaveTooSmall, d.Trigger, "only a person raising the cap moves it")
				require.Equal(t, []string{"w"}, d.WaitFor)
				require.Contains(t, d.Reason, "more than the wave's whole cap: raise it (sagactl wave set w)")
			}},
		{name: "closed", wave: "w", admission: budget.Admission{Closed: true}, want: phases.Halt,
			check: func(t *testing.T, d phases.Decision) {
				require.Equal(t, "wave_closed:w", d.Halt.String())
				require.Equal(t, 19, d.Findings[0].Rule)
			}},
		{name: "producer not admitted", wave: "w", admission: budget.Admission{NotAdmitted: true}, want: phases.Halt,
			check: func(t *testing.T, d phases.Decision) {
				require.Equal(t, "wave_not_admitted:w", d.Halt.String())
				require.Contains(t, d.Findings[0].Message, `"mallory"`)
			}},
		{name: "reservation fails", wave: "w", err: errors.New("kv down"), want: phases.Retry},
		{name: "no wave", want: phases.Advance, check: func(t *testing.T, d phases.Decision) { require.Nil(t, d.Record) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			w := &fakeWaves{admission: tt.admission, err: tt.err}
			b.env.Waves = w
			doc := newDoc()
			if tt.wave != "" {
				doc = doc.Set("wave_id", tt.wave)
			}
			raw := doc.Sealed(t)
			cp := &capsule.Checkpoint{Key: doc.ID(), Producer: "mallory", State: capsule.CheckpointState{Phase: capsule.AutomatedGates}}
			if tt.override > 0 {
				cp.State.Overrides = &capsule.Overrides{Tokens: tt.override}
			}
			in := &phases.Input{Capsule: decode(t, raw), Raw: raw, Checkpoint: cp}
			d := phases.AutomatedGates{}.Run(context.Background(), b.env, in)
			require.Equal(t, tt.want, d.Action, "%+v", d)
			if tt.wave == "" {
				require.Empty(t, w.calls)
			} else {
				require.Equal(t, []string{doc.ID() + "/" + tt.wave}, w.calls, "reserved under the checkpoint key")
				require.Equal(t, []string{"mallory"}, w.producers, "for the checkpoint's producer")
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

func TestWaveWaitReason(t *testing.T) {
	t.Parallel()
	caps := capsule.Budget{Tokens: 100, Dollars: 1.5}
	require.Equal(t, "wave x has 0 of 2 dollars left; the capsule needs 100 tokens and 1.5 dollars",
		phases.WaveWaitReason("x", budget.Wave{DollarsCap: 2, Used: capsule.Usage{Dollars: 2.5}}, caps))
	require.Equal(t, "wave x has 50 of 100 tokens and 1 of 2 dollars left; the capsule needs 100 tokens and 1.5 dollars",
		phases.WaveWaitReason("x", budget.Wave{TokensCap: 100, DollarsCap: 2, Used: capsule.Usage{Tokens: 50, Dollars: 1}}, caps))
}
