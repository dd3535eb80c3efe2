package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// gateGauge reads sagad_capsules_paused{trigger="operator_gate"} from reg,
// -1 when the series is absent.
func gateGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sagad_capsules_paused" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "trigger" && l.GetValue() == string(capsule.TriggerOperatorGate) {
					return s.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestOperatorGateCounted: capsules waiting at the operator gate keep no
// continuation, yet sagad_capsules_paused{trigger="operator_gate"} counts
// them (it read 0 before: the collector counted continuations only), and a
// decision takes the capsule out of the count.
func TestOperatorGateCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	f := setupWith(t, func(c *pipeline.Config) {
		c.Metrics = m
		c.RescueAfter = 300 * time.Millisecond
	})
	col, err := metrics.NewJetStreamCollector(f.js, metrics.CollectorConfig{
		Names:            metrics.Names{PhaseStream: store.PhaseStream, ConsumerName: store.ConsumerName, ContinuationsBucket: store.ContinuationsBucket},
		Timeout:          5 * time.Second,
		AwaitingOperator: m.AwaitingOperatorCount,
	})
	require.NoError(t, err)
	reg.MustRegister(col)
	ctx := context.Background()

	var docs []capsuletest.Doc
	for range 3 {
		doc := f.own(t, capsuletest.New().Set("review.operator_gate", true))
		f.publish(t, doc.Sealed(t))
		docs = append(docs, doc)
	}
	for _, d := range docs {
		f.waitState(t, d.ID(), capsule.WaitingForOperator)
	}
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return gateGauge(t, reg) == 3 },
		"the operator gate's series never counted the 3 waiting capsules")

	_, err = f.admin(t).Decide(ctx, docs[0].ID(), admin.DecisionAccept, "fine", "carol")
	require.NoError(t, err)
	f.wait(t, docs[0].ID())
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return gateGauge(t, reg) == 2 },
		"a decided capsule stayed in the operator gate's count")
}
