package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
)

// nopPhase decides nothing: what remains is the attempt's own cost.
type nopPhase struct{}

func (nopPhase) Run(context.Context, *phases.Env, *phases.Input) phases.Decision {
	return phases.Decision{}
}

// BenchmarkDecide makes an attempt's run and hands its phase the input, as
// every attempt does (the phase itself does nothing).
func BenchmarkDecide(b *testing.B) {
	p := &Pipeline{}
	for ph := range p.phases {
		p.phases[ph] = nopPhase{}
	}
	cp := &capsule.Checkpoint{Key: "k", State: capsule.CheckpointState{Status: capsule.InProgress, Phase: capsule.Execution, Cycle: 1}}
	c, md, ctx, start := &capsule.Capsule{CapsuleID: "c"}, &jetstream.MsgMetadata{NumDelivered: 1}, context.Background(), time.Now()
	b.ReportAllocs()
	for b.Loop() {
		r := &run{p: p, ph: capsule.Execution, cycle: 1, c: c}
		r.t = &r.txn
		r.t.cp = cp
		_ = r.decide(ctx, start, md, nil)
	}
}
