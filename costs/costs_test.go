package costs

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func cp(key, wave, producer string, st capsule.State, used capsule.Usage, at time.Time) *capsule.Checkpoint {
	c := &capsule.Checkpoint{Key: key, CapsuleID: key, WaveID: wave, Producer: producer, CreatedAt: at, UpdatedAt: at}
	c.State.Status = st
	c.State.BudgetUsed = used
	return c
}

func TestSummarise(t *testing.T) {
	t.Parallel()
	d1 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	d2 := d1.Add(24 * time.Hour)
	running := cp("c", "w1", "", capsule.InProgress, capsule.Usage{Tokens: 100, Dollars: 0.02}, d2)
	running.State.WaveReserved = &capsule.Usage{Tokens: 1000, Dollars: 1}
	running.State.Attempts = &capsule.ExecutionAttempts{Cycle: 1, Failed: 2}
	running.Chain = &capsule.ChainStep{ID: "ch", Step: 1}
	entries := []Entry{
		Of(cp("a", "w1", "p", capsule.Completed, capsule.Usage{Tokens: 10, Dollars: 0.01}, d1), "code"),
		Of(cp("b", "w1", "p", capsule.Halted, capsule.Usage{Tokens: 30, Dollars: 0.05}, d1), "code"),
		Of(running, ""),
	}

	r, err := Summarise(entries, ByWave, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, r.Groups, 1)
	g := r.Groups[0]
	require.Equal(t, "w1", g.Key)
	require.Equal(t, 3, g.Capsules)
	require.Equal(t, int64(140), g.Tokens)
	require.Equal(t, 0.08, g.Dollars, "summed, then rounded to the cent")
	require.Equal(t, 0.05, g.FailedDollars)
	require.Equal(t, 0.625, g.FailedShare)
	require.Equal(t, 2, g.FailedAttempts)
	require.Equal(t, int64(900), g.ReservedTokens)
	require.Equal(t, 0.98, g.ReservedDollars)
	require.Equal(t, []Day{{Day: "2026-11-01", Tokens: 40, Dollars: 0.06, FailedTokens: 30, FailedDollars: 0.05},
		{Day: "2026-11-02", Tokens: 100, Dollars: 0.02}}, r.Days)

	r, err = Summarise(entries, ByKind, d2, 0)
	require.NoError(t, err)
	require.Equal(t, []string{None}, keys(r.Groups), "since leaves out the older capsules")
	require.Equal(t, 1, r.Total.Capsules)

	r, err = Summarise(entries, ByProducer, time.Time{}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p", None}, keys(r.Groups))

	r, err = Summarise(entries, ByChain, time.Time{}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{None, "ch"}, keys(r.Groups), "most spent first")

	r, err = Summarise(entries, ByComposition, time.Time{}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{None, "ch"}, keys(r.Groups), "a composition's steps carry its id as their chain")
	require.Empty(t, r.Note)
	require.Equal(t, 3, r.Total.Capsules)

	_, err = Summarise(entries, "capsule", time.Time{}, 0)
	require.Error(t, err)
}

func TestSummariseFoldsPastTheLimit(t *testing.T) {
	t.Parallel()
	var entries []Entry
	for i := range 10 {
		entries = append(entries, Of(cp(fmt.Sprint(i), fmt.Sprintf("w%d", i), "", capsule.Completed,
			capsule.Usage{Tokens: int64(i), Dollars: float64(i)}, time.Unix(0, 0)), ""))
	}
	r, err := Summarise(entries, ByWave, time.Time{}, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"w9", "w8", Other}, keys(r.Groups))
	require.Equal(t, 8, r.Groups[2].Capsules)
	require.Equal(t, float64(28), r.Groups[2].Dollars)
}

func keys(gs []Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Key)
	}
	return out
}

// TestSummariseCountsEstimates: a capsule whose tokens sagad estimated (an
// agent that reported no usage) is counted in its group and the total.
func TestSummariseCountsEstimates(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	entries := []Entry{
		Of(cp("a", "w1", "p", capsule.Completed, capsule.Usage{Tokens: 10, Dollars: 0.5, Estimated: true}, at), "agent"),
		Of(cp("b", "w1", "p", capsule.Completed, capsule.Usage{Tokens: 30}, at), "code"),
		Of(cp("c", "w2", "p", capsule.Completed, capsule.Usage{Tokens: 5, Estimated: true}, at), "agent"),
	}
	r, err := Summarise(entries, ByWave, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, r.Groups, 2)
	require.Equal(t, 1, r.Groups[0].EstimatedCapsules)
	require.Equal(t, 1, r.Groups[1].EstimatedCapsules)
	require.Equal(t, 2, r.Total.EstimatedCapsules)
}

// TestSummariseNamesCompositionWaves: grouped by wave, a composition's
// wave (composition-<its step's id>) is named by the step whose id it
// carries, run 2 with its run; another capsule in the wave claiming
// another composition names nothing, and other waves have no name.
func TestSummariseNamesCompositionWaves(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	step := func(key, wave, composition string, run int) Entry {
		c := cp(key, wave, "p", capsule.Completed, capsule.Usage{Tokens: 10}, at)
		c.Chain = &capsule.ChainStep{ID: composition, Run: run}
		return Of(c, "")
	}
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    map[string]string
	}{
		{"first step names it", []Entry{step("s2", "composition-s1", "fan", 0), step("s1", "composition-s1", "fan", 0)},
			map[string]string{"composition-s1": "fan"}},
		{"run 2", []Entry{step("r1", "composition-r1", "fan", 2)}, map[string]string{"composition-r1": "fan#2"}},
		{"only the step the id names", []Entry{step("x", "composition-s1", "forged", 0)}, map[string]string{"composition-s1": ""}},
		{"not a composition's wave", []Entry{step("s1", "w1", "fan", 0)}, map[string]string{"w1": ""}},
		{"a plain capsule", []Entry{Of(cp("s1", "composition-s1", "p", capsule.Completed, capsule.Usage{}, at), "")},
			map[string]string{"composition-s1": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Summarise(tc.entries, ByWave, time.Time{}, 0)
			require.NoError(t, err)
			got := map[string]string{}
			for _, g := range r.Groups {
				got[g.Key] = g.Name
			}
			require.Equal(t, tc.want, got)
			r, err = Summarise(tc.entries, ByComposition, time.Time{}, 0)
			require.NoError(t, err)
			for _, g := range r.Groups {
				require.Empty(t, g.Name, "only waves are named")
			}
		})
	}
}
