package budget_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type fixture struct {
	ctx context.Context
	s   *server.Server
	js  jetstream.JetStream
	tr  *budget.Tracker
}

func setup(t *testing.T) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	f := &fixture{ctx: context.Background(), s: s, js: js}
	f.tr = f.tracker(t, js)
	return f
}

func (f *fixture) tracker(t *testing.T, js jetstream.JetStream) *budget.Tracker {
	t.Helper()
	tr, err := budget.New(f.ctx, js, budget.Config{})
	require.NoError(t, err)
	return tr
}

// stored reads key's value straight from the bucket.
func (f *fixture) stored(t *testing.T, key string) map[string]any {
	t.Helper()
	kv, err := f.js.KeyValue(f.ctx, "SAGA_BUDGETS")
	require.NoError(t, err)
	e, err := kv.Get(f.ctx, key)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(e.Value(), &v))
	return v
}

var caps = capsule.Budget{Tokens: 1000, Dollars: 2}

func TestChargeAccumulates(t *testing.T) {
	t.Parallel()
	f := setup(t)

	res, err := f.tr.Charge(f.ctx, "cap-1", "", "cap-1/1/exec", caps, capsule.Usage{Tokens: 600, Dollars: 0.5})
	require.NoError(t, err)
	require.Equal(t, budget.ChargeResult{Capsule: capsule.Usage{Tokens: 600, Dollars: 0.5}}, res)

	res, err = f.tr.Charge(f.ctx, "cap-1", "", "cap-1/1/review", caps, capsule.Usage{Tokens: 400, Dollars: 0.25})
	require.NoError(t, err)
	require.Equal(t, budget.ChargeResult{Capsule: capsule.Usage{Tokens: 1000, Dollars: 0.75}}, res, "reaching a cap is within it")

	// Crossing the cap is reported, and the usage recorded all the same.
	res, err = f.tr.Charge(f.ctx, "cap-1", "", "cap-1/2/exec", caps, capsule.Usage{Tokens: 1, Dollars: 5})
	require.NoError(t, err)
	require.Equal(t, capsule.BudgetTokens, res.Exceeded)
	used, err := f.tr.Used(f.ctx, "cap-1")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{Tokens: 1001, Dollars: 5.75}, used)

	require.Equal(t, map[string]any{
		"tokens_cap":  1000.0,
		"dollars_cap": 2.0,
		"used":        map[string]any{"tokens": 1001.0, "dollars": 5.75},
		"closed":      false,
		"applied":     []any{"cap-1/1/exec", "cap-1/1/review", "cap-1/2/exec"},
	}, f.stored(t, "capsule.cap-1"))

	used, err = f.tr.Used(f.ctx, "never-charged")
	require.NoError(t, err)
	require.Zero(t, used)
}

func TestChargeDollarsCrossed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	res, err := f.tr.Charge(f.ctx, "cap-1", "", "c1", caps, capsule.Usage{Tokens: 10, Dollars: 2.5})
	require.NoError(t, err)
	require.Equal(t, capsule.BudgetDollars, res.Exceeded)
}

func TestChargeIsIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	u := capsule.Usage{Tokens: 100, Dollars: 0.5}

	first, err := f.tr.Charge(f.ctx, "cap-1", "wave-1", "cap-1/1/exec", caps, u)
	require.NoError(t, err)
	again, err := f.tr.Charge(f.ctx, "cap-1", "wave-1", "cap-1/1/exec", caps, u)
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.Equal(t, budget.ChargeResult{Capsule: u, Wave: u}, again)

	w, ok, err := f.tr.Wave(f.ctx, "wave-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, u, w.Used)
}

func TestAppliedIDsAreBounded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 40 {
		_, err := f.tr.Charge(f.ctx, "cap-1", "", fmt.Sprintf("c%d", i), caps, capsule.Usage{Tokens: 1})
		require.NoError(t, err)
	}
	applied := f.stored(t, "capsule.cap-1")["applied"].([]any)
	require.Len(t, applied, 32)
	require.Equal(t, "c8", applied[0])
	require.Equal(t, "c39", applied[31])

	res, err := f.tr.Charge(f.ctx, "cap-1", "", "c39", caps, capsule.Usage{Tokens: 1})
	require.NoError(t, err)
	require.Equal(t, int64(40), res.Capsule.Tokens, "a recent charge id is still recognised")
}

func TestWaveAggregatesCapsules(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, ok, err := f.tr.Wave(f.ctx, "wave-1")
	require.NoError(t, err)
	require.False(t, ok)

	_, err = f.tr.Charge(f.ctx, "cap-1", "wave-1", "cap-1/1/exec", caps, capsule.Usage{Tokens: 100, Dollars: 0.25})
	require.NoError(t, err)
	res, err := f.tr.Charge(f.ctx, "cap-2", "wave-1", "cap-2/1/exec", caps, capsule.Usage{Tokens: 30, Dollars: 0.5})
	require.NoError(t, err)
	require.Equal(t, budget.ChargeResult{
		Capsule: capsule.Usage{Tokens: 30, Dollars: 0.5},
		Wave:    capsule.Usage{Tokens: 130, Dollars: 0.75},
	}, res)

	w, ok, err := f.tr.Wave(f.ctx, "wave-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, budget.Wave{Used: capsule.Usage{Tokens: 130, Dollars: 0.75}}, w, "a wave charged before it was set has no caps")
	used, err := f.tr.Used(f.ctx, "cap-1")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{Tokens: 100, Dollars: 0.25}, used)
}

func TestWaveCapCrossing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		tokensCap  int64
		dollarsCap float64
		caps       capsule.Budget
		want       string
	}{
		{"wave tokens", 100, 0, caps, capsule.BudgetWaveTokens},
		{"wave dollars", 0, 1, caps, capsule.BudgetWaveDollars},
		{"wave tokens before wave dollars", 100, 1, caps, capsule.BudgetWaveTokens},
		{"capsule cap before wave cap", 100, 1, capsule.Budget{Tokens: 50}, capsule.BudgetTokens},
		{"no wave caps", 0, 0, caps, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			require.NoError(t, f.tr.SetWave(f.ctx, "w", tt.tokensCap, tt.dollarsCap, false))

			res, err := f.tr.Charge(f.ctx, "cap-1", "w", "cap-1/1/exec", tt.caps, capsule.Usage{Tokens: 40, Dollars: 0.5})
			require.NoError(t, err)
			require.Empty(t, res.Exceeded, "first capsule fits")
			res, err = f.tr.Charge(f.ctx, "cap-2", "w", "cap-2/1/exec", tt.caps, capsule.Usage{Tokens: 70, Dollars: 0.75})
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Exceeded)
			require.Equal(t, capsule.Usage{Tokens: 110, Dollars: 1.25}, res.Wave)
		})
	}
}

func TestSetWaveKeepsUsage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.tr.Charge(f.ctx, "cap-1", "w", "c1", caps, capsule.Usage{Tokens: 10, Dollars: 0.25})
	require.NoError(t, err)

	require.NoError(t, f.tr.SetWave(f.ctx, "w", 500, 3, true))
	w, ok, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, budget.Wave{TokensCap: 500, DollarsCap: 3, Used: capsule.Usage{Tokens: 10, Dollars: 0.25}, Closed: true}, w)

	// A closed wave still records what its capsules used.
	res, err := f.tr.Charge(f.ctx, "cap-1", "w", "c2", caps, capsule.Usage{Tokens: 5})
	require.NoError(t, err)
	require.Equal(t, int64(15), res.Wave.Tokens)
}

// TestConcurrentChargesSumExactly charges one wave from 2 Trackers on separate
// connections (two sagad processes) × 10 goroutines × 10 charges.
func TestConcurrentChargesSumExactly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, js2 := natstest.Connect(t, f.s)
	trackers := []*budget.Tracker{f.tr, f.tracker(t, js2)}
	require.NoError(t, f.tr.SetWave(f.ctx, "w", 1_000_000, 0, false))

	const goroutines, charges = 10, 10
	u := capsule.Usage{Tokens: 3, Dollars: 0.125}
	var wg sync.WaitGroup
	for i, tr := range trackers {
		for g := range goroutines {
			id := fmt.Sprintf("cap-%d-%d", i, g)
			wg.Go(func() {
				for c := range charges {
					_, err := tr.Charge(f.ctx, id, "w", fmt.Sprintf("%s/%d", id, c), caps, u)
					if err != nil {
						t.Errorf("%s charge %d: %v", id, c, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()

	n := int64(len(trackers) * goroutines * charges)
	w, _, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 3*n, w.Used.Tokens)
	require.InDelta(t, 0.125*float64(n), w.Used.Dollars, 1e-9)
	used, err := f.tr.Used(f.ctx, "cap-1-9")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{Tokens: 3 * charges, Dollars: 0.125 * charges}, used)
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name                        string
		capsuleID, waveID, chargeID string
		u                           capsule.Usage
		want                        string
		is                          error // when the cause is a sentinel
	}{
		{"empty capsule id", "", "", "c", capsule.Usage{Tokens: 1}, "budget: charge: empty capsule id", nil},
		{"empty charge id", "cap-1", "", "", capsule.Usage{Tokens: 1}, "budget: charge capsule cap-1: empty charge id", nil},
		{"negative tokens", "cap-1", "", "c", capsule.Usage{Tokens: -1}, "budget: charge c: usage must be non-negative", nil},
		{"negative dollars", "cap-1", "", "c", capsule.Usage{Dollars: -0.5}, "budget: charge c: usage must be non-negative", nil},
		{"NaN dollars", "cap-1", "", "c", capsule.Usage{Dollars: math.NaN()}, "budget: charge c: usage must be non-negative", nil},
		{"capsule id not a KV key", "cap 1", "", "c", capsule.Usage{Tokens: 1}, "budget: charge c: capsule cap 1:", jetstream.ErrInvalidKey},
		{"wave id not a KV key", "cap-1", "w*", "c", capsule.Usage{Tokens: 1}, "budget: charge c: wave w*:", jetstream.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.tr.Charge(f.ctx, tt.capsuleID, tt.waveID, tt.chargeID, caps, tt.u)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
		})
	}
	// Refused before anything was charged.
	used, err := f.tr.Used(f.ctx, "cap-1")
	require.NoError(t, err)
	require.Zero(t, used)

	for _, tt := range []struct {
		name    string
		tokens  int64
		dollars float64
	}{
		{"negative tokens cap", -1, 0},
		{"negative dollars cap", 0, -0.5},
		{"NaN dollars cap", 0, math.NaN()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := f.tr.SetWave(f.ctx, "w", tt.tokens, tt.dollars, false)
			require.Error(t, err)
			require.Contains(t, err.Error(), "budget: set wave w: caps must be non-negative")
		})
	}
	_, ok, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.False(t, ok, "a refused SetWave creates no wave")

	_, err = budget.New(f.ctx, f.js, budget.Config{Bucket: "OTHER", Replicas: -1})
	require.Error(t, err)
	require.Contains(t, err.Error(), "budget: replicas must be at least 1, got -1")
	_, err = f.js.KeyValue(f.ctx, "OTHER")
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound, "an invalid config creates no bucket")
}
