package pipeline

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/store"
)

// TestPhaseSpanOptionsShared: the span options made once per phase are
// shared by every message of the phase, so spans started from them at once
// (under -race) must each get their own phase's messaging attributes and
// their own cycle, and leave the shared options as they were made.
func TestPhaseSpanOptionsShared(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(tp)
	const perPhase = 20
	var wg sync.WaitGroup
	for ph := capsule.Reception; ph < capsule.NumPhases; ph++ {
		for cycle := range perPhase {
			wg.Go(func() {
				c := tracing.Capsule{ID: fmt.Sprintf("c-%d-%d", ph, cycle), Key: "k"}
				_, span := tr.StartPhase(context.Background(), "", "", c, ph.String(), cycle, phaseSpanOptions(ph)...)
				span.End()
			})
		}
	}
	wg.Wait()
	got := spans.GetSpans()
	require.Len(t, got, int(capsule.NumPhases)*perPhase)
	for _, s := range got {
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes {
			require.NotContains(t, a, kv.Key, "%s: %s twice", s.Name, kv.Key)
			a[kv.Key] = kv.Value
		}
		var ph capsule.Phase
		for p := capsule.Reception; p < capsule.NumPhases; p++ {
			if s.Name == tracing.SpanPhase+p.String() {
				ph = p
			}
		}
		require.Equal(t, store.PhaseSubject(ph), a[tracing.AttrMessagingDestination].AsString(), s.Name)
		require.Equal(t, store.ConsumerName(ph), a[tracing.AttrMessagingConsumerGroup].AsString(), s.Name)
		require.Equal(t, fmt.Sprintf("c-%d-%d", ph, a[tracing.AttrCycle].AsInt64()), a[tracing.AttrCapsuleID].AsString(), s.Name)
	}
	for ph := capsule.Reception; ph < capsule.NumPhases; ph++ {
		require.Len(t, phaseSpanOptions(ph), 2, "phase %s's shared options grew", ph)
	}
}
