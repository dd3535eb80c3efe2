package pipeline_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
)

func ptr[T any](v T) *T { return &v }

// waveDoc is a capsule of wave with a 1,000-token cap whose executor (kind,
// "slow" waits for the fixture's gate) and reviewer use 500 tokens in all.
func waveDoc(t *testing.T, f *fixture, wave, kind string) capsuletest.Doc {
	t.Helper()
	return f.bundle.WaveDoc(t, wave, kind)
}

func waveSetup(t *testing.T) *fixture {
	return setupWith(t, func(c *pipeline.Config) { c.SweepInterval = 50 * time.Millisecond })
}

func (f *fixture) waveOf(t *testing.T, id string) budget.Wave {
	t.Helper()
	w, ok, err := f.pipe.Store().Budgets.Wave(context.Background(), id)
	require.NoError(t, err)
	require.True(t, ok)
	return w
}

// statesOf counts the capsules' states.
func (f *fixture) statesOf(docs []capsuletest.Doc) map[capsule.State]int {
	n := map[capsule.State]int{}
	for _, d := range docs {
		s, err := f.client.Status(context.Background(), d.ID())
		if err == nil {
			n[s.State]++
		}
	}
	return n
}

// TestWaveAdmission is issue 14's test: five 1,000-token capsules through a
// 3,000-token wave: three run, two wait (state waiting, waiting_on
// wave_capacity) before anything is spent, and all five complete once the
// cap is raised. Every reservation is released when its capsule ends: what
// the capsules used is the wave's total, nothing stays reserved.
func TestWaveAdmission(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()
	_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "w5", budget.WaveChange{Tokens: ptr(int64(3000))})
	require.NoError(t, err)

	docs := make([]capsuletest.Doc, 5)
	for i := range docs {
		docs[i] = waveDoc(t, f, "w5", "slow") // held in EXECUTION until the gate opens
		f.publish(t, docs[i].Sealed(t))
	}
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		n := f.statesOf(docs)
		return n[capsule.Waiting] == 2 && n[capsule.InProgress] == 3 && f.executed.Load() == 3
	}, "three run, two wait")
	w := f.waveOf(t, "w5")
	require.Equal(t, int64(3000), w.Reserved.Tokens)
	require.Equal(t, 3, w.Holders)
	for _, d := range docs {
		s, err := f.client.Status(ctx, d.ID())
		require.NoError(t, err)
		if s.State != capsule.Waiting {
			continue
		}
		require.Equal(t, "wave_capacity", s.WaitingOn)
		require.Equal(t, []string{"w5"}, s.Pending)
		require.Equal(t, int(capsule.AutomatedGates), s.Phase, "nothing is spent while it waits")
		require.Equal(t, capsule.Usage{}, s.BudgetUsed)
		cp, err := f.client.Checkpoint(ctx, d.ID())
		require.NoError(t, err)
		require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
		require.Nil(t, cp.State.WaveReserved)
		// The wait's event goes out right after the checkpoint records it.
		natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
			return slices.Contains(eventKinds(t, f, d.ID()), capsule.EventWaveWait)
		}, "the waiting_for_wave_capacity event")
	}
	// The waiters do not move while the wave is full (several sweeps).
	time.Sleep(300 * time.Millisecond) //nolint:forbidigo // asserting that nothing happens needs time to pass
	require.Equal(t, 2, f.statesOf(docs)[capsule.Waiting])

	_, err = f.pipe.Store().Budgets.ChangeWave(ctx, "w5", budget.WaveChange{Tokens: ptr(int64(5000))})
	require.NoError(t, err)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return f.statesOf(docs)[capsule.InProgress] == 5 && f.waveOf(t, "w5").Holders == 5
	}, "the raised cap lets the two waiting capsules in")
	for range docs {
		f.gate <- struct{}{}
	}
	for _, d := range docs {
		s := f.wait(t, d.ID())
		require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
		cp, err := f.client.Checkpoint(ctx, d.ID())
		require.NoError(t, err)
		require.Equal(t, &capsule.Usage{Tokens: 1000, Dollars: 5}, cp.State.WaveReserved)
	}
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		w = f.waveOf(t, "w5")
		return w.Holders == 0
	}, "every reservation released")
	require.Equal(t, capsule.Usage{}, w.Reserved)
	require.Equal(t, int64(2500), w.Used.Tokens, "five capsules of 500 tokens")
}

// TestWaveFreedCapacity: a waiting capsule goes on by itself when a running
// capsule of its wave ends and releases what it did not use.
func TestWaveFreedCapacity(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()
	_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "wf", budget.WaveChange{Tokens: ptr(int64(1500))})
	require.NoError(t, err)
	first, second := waveDoc(t, f, "wf", "slow"), waveDoc(t, f, "wf", "stub")
	f.publish(t, first.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return f.executed.Load() == 1 }, "first runs")
	f.publish(t, second.Sealed(t))
	f.waitState(t, second.ID(), capsule.Waiting)
	f.gate <- struct{}{}
	require.Equal(t, capsule.Completed, f.wait(t, first.ID()).State)
	// 1,500 − 500 used = 1,000 left once the first released its other 500.
	s := f.wait(t, second.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
}

// TestWaveClosedHaltsWaiters: closing a wave halts the capsules waiting for
// its capacity with wave_closed:<wave>; a capsule published to a closed
// wave halts on Rule 19; a running capsule finishes.
func TestWaveClosedHaltsWaiters(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()
	_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "wc", budget.WaveChange{Tokens: ptr(int64(1000))})
	require.NoError(t, err)
	running, waiter := waveDoc(t, f, "wc", "slow"), waveDoc(t, f, "wc", "stub")
	f.publish(t, running.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return f.executed.Load() == 1 }, "the first runs")
	f.publish(t, waiter.Sealed(t))
	f.waitState(t, waiter.ID(), capsule.Waiting)

	_, err = f.pipe.Store().Budgets.ChangeWave(ctx, "wc", budget.WaveChange{Close: true})
	require.NoError(t, err)
	s := f.wait(t, waiter.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "wave_closed:wc", s.HaltReason)
	require.Equal(t, capsule.Usage{}, s.BudgetUsed)

	late := waveDoc(t, f, "wc", "stub")
	f.publish(t, late.Sealed(t))
	s = f.wait(t, late.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "absolute_rules_violated:[19]", s.HaltReason)

	f.gate <- struct{}{}
	require.Equal(t, capsule.Completed, f.wait(t, running.ID()).State, "a closed wave lets its running capsules finish")
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return f.waveOf(t, "wc").Holders == 0 }, "released")
}

// TestWaveReleaseOnHaltAndCancel: a capsule that halts after admission (its
// executor fails) and one cancelled by an operator release their
// reservations, and a waiting capsule cancelled holds none.
func TestWaveReleaseOnHaltAndCancel(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()
	a := f.admin(t)
	_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "wr", budget.WaveChange{Tokens: ptr(int64(2100))}) // the failing capsule's 100, two of 1,000
	require.NoError(t, err)

	failing := f.own(t, capsuletest.New().Set("wave_id", "wr").Set("budget.tokens", 1000).Stub(map[string]any{
		"fail": "boom", "usage": map[string]any{"tokens": 100, "dollars": 0.01},
	}))
	f.publish(t, failing.Sealed(t))
	s := f.wait(t, failing.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Contains(t, s.HaltReason, "executor_failed")

	held := waveDoc(t, f, "wr", "slow")
	t.Cleanup(func() { close(f.gate) })
	f.publish(t, held.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return f.waveOf(t, "wr").Holders == 1 }, "admitted")
	filler := waveDoc(t, f, "wr", "slow")
	f.publish(t, filler.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return f.waveOf(t, "wr").Holders == 2 }, "admitted")
	waiting := waveDoc(t, f, "wr", "stub")
	f.publish(t, waiting.Sealed(t))
	f.waitState(t, waiting.ID(), capsule.Waiting)

	_, err = a.Cancel(ctx, waiting.ID(), "not needed", "tester")
	require.NoError(t, err)
	for _, d := range []capsuletest.Doc{held, filler} {
		_, err = a.Cancel(ctx, d.ID(), "not needed", "tester")
		require.NoError(t, err)
	}
	w := f.waveOf(t, "wr")
	require.Zero(t, w.Holders, "released by the cancels themselves")
	require.Equal(t, capsule.Usage{}, w.Reserved)
	var st client.Status
	st, err = f.client.Status(ctx, waiting.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, st.State)
}

// TestWaveReservationRedelivered: a delivery of AUTOMATED_GATES that
// reserved and died before recording it (simulated by reserving first)
// leaves one reservation when the next delivery admits the capsule, and
// its end releases it.
func TestWaveReservationRedelivered(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()
	tr := f.pipe.Store().Budgets
	_, err := tr.ChangeWave(ctx, "wd", budget.WaveChange{Tokens: ptr(int64(1000))})
	require.NoError(t, err)
	d := waveDoc(t, f, "wd", "slow")
	a, err := tr.Reserve(ctx, "wd", d.ID(), capsule.Budget{Tokens: 1000, Dollars: 5})
	require.NoError(t, err)
	require.True(t, a.Admitted)

	f.publish(t, d.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return f.executed.Load() == 1 }, "admitted on the full wave: the reservation is its own")
	w := f.waveOf(t, "wd")
	require.Equal(t, 1, w.Holders)
	require.Equal(t, int64(1000), w.Reserved.Tokens)
	f.gate <- struct{}{}
	require.Equal(t, capsule.Completed, f.wait(t, d.ID()).State)
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return f.waveOf(t, "wd").Holders == 0 }, "released")
	w = f.waveOf(t, "wd")
	require.Equal(t, int64(500), w.Used.Tokens)
	require.Equal(t, capsule.Usage{}, w.Reserved)
}

// TestWaveTwoSagads: two sagads admit the capsules of one wave at once;
// the wave never holds more than its cap (used + reserved), every capsule
// completes, and in the end nothing stays reserved and the total is exact.
func TestWaveTwoSagads(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()
	_, js := natstest.Connect(t, f.srv)
	other, err := pipeline.New(ctx, js, f.cfg)
	require.NoError(t, err)
	require.NoError(t, other.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		other.Stop(ctx)
	})
	tr := f.pipe.Store().Budgets
	_, err = tr.ChangeWave(ctx, "w2", budget.WaveChange{Tokens: ptr(int64(3000))})
	require.NoError(t, err)

	stop := make(chan struct{})
	sampled := make(chan int64, 1)
	go func() {
		var most int64
		defer func() { sampled <- most }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if w, ok, err := tr.Wave(ctx, "w2"); err == nil && ok {
				most = max(most, w.Used.Tokens+w.Reserved.Tokens)
			}
		}
	}()
	docs := make([]capsuletest.Doc, 4)
	for i := range docs {
		docs[i] = waveDoc(t, f, "w2", "stub")
		f.publish(t, docs[i].Sealed(t))
	}
	for _, d := range docs {
		s := f.wait(t, d.ID())
		require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	}
	close(stop)
	require.LessOrEqual(t, <-sampled, int64(3000), "used + reserved never above the cap")
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return f.waveOf(t, "w2").Holders == 0 }, "all released")
	w := f.waveOf(t, "w2")
	require.Equal(t, int64(2000), w.Used.Tokens, "four capsules of 500 tokens, each counted once")
	require.Equal(t, capsule.Usage{}, w.Reserved)
}
