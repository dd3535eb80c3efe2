package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestExemplarOncePerSecond: a bucket's exemplar is replaced by an
// observation at least a second after it was set, not before; each bucket
// has its own second, and an id that is not a trace id does not use it.
func TestExemplarOncePerSecond(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, BuildInfo{})
	clock := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return clock }
	const (
		a = "0af7651916cd43dd8448eb211c80319c"
		b = "1af7651916cd43dd8448eb211c80319c"
		c = "2af7651916cd43dd8448eb211c80319c"
	)
	exemplars := func() map[float64]string {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		got := map[float64]string{}
		for _, mf := range mfs {
			if mf.GetName() != "sagad_phase_duration_seconds" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				if labelOf(mt.GetLabel(), "phase") != "EXECUTION" || labelOf(mt.GetLabel(), "outcome") != capsule.OutcomePassed {
					continue
				}
				for _, bk := range mt.GetHistogram().GetBucket() {
					if ex := bk.GetExemplar(); ex != nil {
						got[bk.GetUpperBound()] = ex.GetLabel()[0].GetValue()
					}
				}
			}
		}
		return got
	}
	obs := func(d time.Duration, tid string) {
		m.TransitionTraced(capsule.Execution, capsule.OutcomePassed, d, tid)
	}

	obs(2*time.Millisecond, "not-a-trace-id")
	require.Empty(t, exemplars(), "an id that is not one is no exemplar")
	obs(2*time.Millisecond, a)
	require.Equal(t, map[float64]string{0.005: a}, exemplars(), "the first is kept, the invalid one took no turn")
	clock = clock.Add(999 * time.Millisecond)
	obs(3*time.Millisecond, b)
	obs(time.Second, b) // exactly on an upper bound: that bucket
	require.Equal(t, map[float64]string{0.005: a, 1: b}, exemplars(), "within the second the bucket keeps its exemplar; another bucket gets its own")
	clock = clock.Add(time.Millisecond)
	obs(4*time.Millisecond, c)
	obs(1500*time.Millisecond, c)
	require.Equal(t, map[float64]string{0.005: c, 1: b, 2.5: c}, exemplars(), "a second on, the bucket takes the latest")
	obs(time.Hour, a) // past every bound: +Inf has its own turn
	clock = clock.Add(time.Second)
	obs(time.Second, c)
	require.Equal(t, c, exemplars()[1])
	clock = clock.Add(-time.Hour) // a clock that went back does not hold the bucket for an hour
	obs(time.Second, a)
	require.Equal(t, a, exemplars()[1])

	// Counts are every observation's, exemplar or not.
	require.InDelta(t, 9, testCount(t, reg, "sagad_transitions_total"), 0)
}

func testCount(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, mt := range mf.GetMetric() {
				n += mt.GetCounter().GetValue()
			}
		}
	}
	return n
}

// BenchmarkTransitionTraced is the metrics' part of a transition.
func BenchmarkTransitionTraced(b *testing.B) {
	m := New(prometheus.NewRegistry(), BuildInfo{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.TransitionTraced(capsule.Execution, capsule.OutcomePassed, 3*time.Millisecond, "0af7651916cd43dd8448eb211c80319c")
	}
}
