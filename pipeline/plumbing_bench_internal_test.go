package pipeline

import (
	"context"
	"github.com/sagad/sagad/capsule"
	"log/slog"
	"testing"
	"time"

	"github.com/sagad/sagad/internal/seqid"
)

// BenchmarkRunToken makes run tokens from every worker at once, as the
// phase workers do.
func BenchmarkRunToken(b *testing.B) {
	p := &Pipeline{cfg: Config{InstanceID: "sagad-host-12345-AbCdEfGh"}, tokens: seqid.New()}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = p.runToken()
		}
	})
}

// BenchmarkHeartbeat arms and stops an attempt's heartbeat before its
// first beat, as nearly every attempt does.
func BenchmarkHeartbeat(b *testing.B) {
	p := &Pipeline{cfg: Config{Heartbeat: time.Minute}, log: slog.New(slog.DiscardHandler), clock: newClock(time.Minute)}
	p.clock.start()
	defer p.clock.stop()
	ctx := context.Background()
	t := &txn{p: p, key: "k"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			hb := p.heartbeat(ctx, new(beat), nil, t, 1, func() {})
			hb.stop()
		}
	})
}

// BenchmarkTraceIDOf reads a checkpoint's trace id for its exemplar, as
// every transition does.
func BenchmarkTraceIDOf(b *testing.B) {
	cp := &capsule.Checkpoint{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	b.ReportAllocs()
	for range b.N {
		if traceIDOf(cp) == "" {
			b.Fatal("no trace id")
		}
	}
}
