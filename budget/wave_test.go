package budget_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
)

func i64(v int64) *int64            { return &v }
func f64(v float64) *float64        { return &v }
func tokens(n int64) capsule.Budget { return capsule.Budget{Tokens: n, Dollars: 1} }

// TestReserveUpToTheCap: five 1,000-token capsules in a 3,000-token wave:
// three are admitted, two are not; raising the cap admits them.
func TestReserveUpToTheCap(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(3000)})
	require.NoError(t, err)
	var admitted []string
	for i := range 5 {
		a, err := f.tr.Reserve(f.ctx, "w", fmt.Sprint("c", i), tokens(1000))
		require.NoError(t, err)
		require.False(t, a.Closed)
		if a.Admitted {
			admitted = append(admitted, fmt.Sprint("c", i))
		}
	}
	require.Equal(t, []string{"c0", "c1", "c2"}, admitted)
	w, ok, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, capsule.Usage{Tokens: 3000, Dollars: 3}, w.Reserved)
	require.Equal(t, 3, w.Holders)
	left, _ := w.Left()
	require.Zero(t, left)

	_, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(5000)})
	require.NoError(t, err)
	for _, id := range []string{"c3", "c4"} {
		a, err := f.tr.Reserve(f.ctx, "w", id, tokens(1000))
		require.NoError(t, err)
		require.True(t, a.Admitted, id)
	}
}

// TestReserveIsIdempotent: a holder reserves once however often it asks,
// even after the wave filled up or closed; a release releases once.
func TestReserveIsIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(1500)})
	require.NoError(t, err)
	for range 3 {
		a, err := f.tr.Reserve(f.ctx, "w", "c", tokens(1000))
		require.NoError(t, err)
		require.True(t, a.Admitted)
		require.Equal(t, int64(1000), a.Wave.Reserved.Tokens)
	}
	_, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Close: true})
	require.NoError(t, err)
	a, err := f.tr.Reserve(f.ctx, "w", "c", tokens(1000))
	require.NoError(t, err)
	require.True(t, a.Admitted, "a redelivered admission of a holder stands")
	a, err = f.tr.Reserve(f.ctx, "w", "other", tokens(1))
	require.NoError(t, err)
	require.True(t, a.Closed)
	require.False(t, a.Admitted)

	got, ok, err := f.tr.Release(f.ctx, "w", "c")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, capsule.Usage{Tokens: 1000, Dollars: 1}, got)
	_, ok, err = f.tr.Release(f.ctx, "w", "c")
	require.NoError(t, err)
	require.False(t, ok, "released once")
	w, _, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{}, w.Reserved)
	require.Zero(t, w.Holders)
}

// TestChargeConsumesTheReservation: what a capsule uses moves from its
// reservation to the total (once per charge id), so used + reserved stays
// what it reserved; the release frees only what it did not use.
func TestChargeConsumesTheReservation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(2000)})
	require.NoError(t, err)
	a, err := f.tr.Reserve(f.ctx, "w", "c", tokens(1000))
	require.NoError(t, err)
	require.True(t, a.Admitted)
	for range 2 { // a redelivered charge counts once
		_, err = f.tr.Charge(f.ctx, "c", "w", "c/1/exec", tokens(1000), capsule.Usage{Tokens: 400, Dollars: 0.25})
		require.NoError(t, err)
	}
	w, _, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{Tokens: 400, Dollars: 0.25}, w.Used)
	require.Equal(t, capsule.Usage{Tokens: 600, Dollars: 0.75}, w.Reserved)
	a, err = f.tr.Reserve(f.ctx, "w", "d", tokens(1001))
	require.NoError(t, err)
	require.False(t, a.Admitted, "1,000 left")

	got, ok, err := f.tr.Release(f.ctx, "w", "c")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, capsule.Usage{Tokens: 600, Dollars: 0.75}, got)
	w, _, err = f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	left, _ := w.Left()
	require.Equal(t, int64(1600), left)
}

// TestReserveRacing: holders racing for a wave from several trackers get
// exactly as many reservations as fit.
func TestReserveRacing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(5000), Dollars: f64(100)})
	require.NoError(t, err)
	trackers := []*budget.Tracker{f.tr, f.tracker(t, f.js), f.tracker(t, f.js)}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
	)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := trackers[i%3].Reserve(f.ctx, "w", fmt.Sprint("c", i/2), tokens(1000)) // each holder twice
			require.NoError(t, err)
			if a.Admitted {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	w, _, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 5, w.Holders)
	require.Equal(t, int64(5000), w.Reserved.Tokens)
	require.Equal(t, 10, admitted, "each admitted holder asked twice")
}

// TestChangeWave: caps change (a cap left out stays), closing is final and
// refuses later cap changes, invalid ids and caps are refused.
func TestChangeWave(t *testing.T) {
	t.Parallel()
	f := setup(t)
	w, err := f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(10), Dollars: f64(2.5)})
	require.NoError(t, err)
	require.Equal(t, int64(10), w.TokensCap)
	w, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(20)})
	require.NoError(t, err)
	require.Equal(t, int64(20), w.TokensCap)
	require.Equal(t, 2.5, w.DollarsCap)
	w, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Close: true})
	require.NoError(t, err)
	require.True(t, w.Closed)
	_, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Close: true})
	require.NoError(t, err, "closing twice")
	_, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(30)})
	require.ErrorIs(t, err, budget.ErrWaveClosed)

	for _, bad := range []struct {
		id string
		ch budget.WaveChange
	}{
		{"", budget.WaveChange{}},
		{"a.b", budget.WaveChange{}},
		{"x", budget.WaveChange{Tokens: i64(-1)}},
		{"x", budget.WaveChange{Dollars: f64(-1)}},
	} {
		_, err := f.tr.ChangeWave(f.ctx, bad.id, bad.ch)
		require.ErrorIs(t, err, budget.ErrInvalidWave, "%+v", bad)
	}

	_, err = f.tr.ChangeWave(f.ctx, "a", budget.WaveChange{})
	require.NoError(t, err)
	list, err := f.tr.Waves(f.ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "a", list[0].ID)
	require.Equal(t, "w", list[1].ID)
	require.True(t, list[1].Closed)
}

// TestReserveForAdmitList: a wave admitting alice refuses mallory (nothing
// reserved), admits alice and sagad's own intake, and names who holds what;
// a holder admitted before the list changed stays admitted; releasing
// forgets the holder's producer.
func TestReserveForAdmitList(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Tokens: i64(3000), Producers: &[]string{"alice"}})
	require.NoError(t, err)
	a, err := f.tr.ReserveFor(f.ctx, "w", "m1", "mallory", tokens(1000))
	require.NoError(t, err)
	require.True(t, a.NotAdmitted)
	require.False(t, a.Admitted)
	a, err = f.tr.ReserveFor(f.ctx, "w", "a1", "alice", tokens(1000))
	require.NoError(t, err)
	require.True(t, a.Admitted)
	a, err = f.tr.Reserve(f.ctx, "w", "own", tokens(500))
	require.NoError(t, err)
	require.True(t, a.Admitted, "sagad's own intake is admitted by every wave")
	w, _, err := f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, w.Producers)
	require.Equal(t, map[string]budget.ProducerHold{
		"alice": {Capsules: 1, Reserved: capsule.Usage{Tokens: 1000, Dollars: 1}},
		"-":     {Capsules: 1, Reserved: capsule.Usage{Tokens: 500, Dollars: 1}},
	}, w.ByProducer)

	// Alice is no longer admitted: her held reservation stays hers.
	_, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Producers: &[]string{"bob"}})
	require.NoError(t, err)
	a, err = f.tr.ReserveFor(f.ctx, "w", "a1", "alice", tokens(1000))
	require.NoError(t, err)
	require.True(t, a.Admitted)
	_, ok, err := f.tr.Release(f.ctx, "w", "a1")
	require.NoError(t, err)
	require.True(t, ok)
	w, _, err = f.tr.Wave(f.ctx, "w")
	require.NoError(t, err)
	require.NotContains(t, w.ByProducer, "alice")

	_, err = f.tr.ChangeWave(f.ctx, "w", budget.WaveChange{Producers: &[]string{"a.b"}})
	require.ErrorIs(t, err, budget.ErrInvalidWave)
}
