package metrics_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/metrics"
)

// The pipeline records on a registry of sagad's own; a halt is counted by
// its code, never by its detail.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: "v0.1.0"})

	m.Received()
	m.Transition(capsule.Reception, capsule.OutcomeHalted, 3*time.Millisecond)
	m.Ended(capsule.Halted, capsule.LockUnavailable("src/a.go"))

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sagad_capsules_halted_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if v := s.GetCounter().GetValue(); v > 0 {
				fmt.Printf("%s{reason=%q} %g\n", mf.GetName(), s.GetLabel()[0].GetValue(), v)
			}
		}
	}
	// Output: sagad_capsules_halted_total{reason="lock_unavailable"} 1
}
