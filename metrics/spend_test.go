package metrics

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestSpend: spend is counted by kind and wave, failed calls' also apart;
// bad amounts are ignored; past MaxSpendLabelValues distinct waves the rest
// count as "other", so operator-chosen wave ids cannot grow the series.
func TestSpend(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, BuildInfo{})
	m.Spend("code", "w1", capsule.Usage{Tokens: 100, Dollars: 0.5}, false)
	m.Spend("code", "w1", capsule.Usage{Tokens: 40, Dollars: 0.25}, true)
	m.Spend("code", "", capsule.Usage{Tokens: -1, Dollars: math.Inf(1)}, true)
	m.Spend("", "", capsule.Usage{Tokens: 7}, false)
	require.Equal(t, 140.0, testutil.ToFloat64(m.spend.tokens.WithLabelValues("code", "w1")))
	require.Equal(t, 0.75, testutil.ToFloat64(m.spend.dollars.WithLabelValues("code", "w1")))
	require.Equal(t, 40.0, testutil.ToFloat64(m.spend.failedTokens.WithLabelValues("code", "w1")))
	require.Equal(t, 0.25, testutil.ToFloat64(m.spend.failedDollars.WithLabelValues("code", "w1")))
	require.Equal(t, 7.0, testutil.ToFloat64(m.spend.tokens.WithLabelValues(SpendNone, SpendNone)))
	require.Zero(t, testutil.ToFloat64(m.spend.tokens.WithLabelValues("code", SpendNone)))

	for i := range 2 * MaxSpendLabelValues {
		m.Spend("code", fmt.Sprintf("wave-%d", i), capsule.Usage{Tokens: 1}, false)
	}
	// w1 took one of the values ("none" takes none): 49 waves keep theirs.
	require.Equal(t, float64(MaxSpendLabelValues+1), testutil.ToFloat64(m.spend.tokens.WithLabelValues("code", Other)))
	require.Equal(t, 3+(MaxSpendLabelValues-1)+1, testutil.CollectAndCount(m.spend.tokens), "code/w1, none/none, code/none, 49 waves and other")

	var nilM *Metrics
	nilM.Spend("code", "w1", capsule.Usage{Tokens: 1}, false) // records nothing, does not panic
}

// TestExemplars: the phase and call latency histograms keep the trace id
// as their observation's exemplar; an id that is not one is left out.
func TestExemplars(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, BuildInfo{})
	const tid = "0af7651916cd43dd8448eb211c80319c"
	m.TransitionTraced(capsule.Execution, capsule.OutcomePassed, time.Second, tid)
	m.CallTraced(KindExecutor, ResultOK, time.Second, tid)
	m.CallTraced(KindReviewer, ResultOK, time.Second, "not-a-trace-id")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	found := map[string]string{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, b := range mt.GetHistogram().GetBucket() {
				if ex := b.GetExemplar(); ex != nil {
					for _, l := range ex.GetLabel() {
						found[mf.GetName()+"/"+labelOf(mt.GetLabel(), "kind")] = l.GetName() + "=" + l.GetValue()
					}
				}
			}
		}
	}
	require.Equal(t, "trace_id="+tid, found["sagad_phase_duration_seconds/"])
	require.Equal(t, "trace_id="+tid, found["sagad_agent_call_duration_seconds/executor"])
	require.NotContains(t, found, "sagad_agent_call_duration_seconds/reviewer")
}

func labelOf(ls []*dto.LabelPair, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
