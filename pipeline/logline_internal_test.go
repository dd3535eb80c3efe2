package pipeline

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestTransitionLineAsLogAttrs: the transition's line, made as a record
// handed to the handler, is the line Logger.LogAttrs wrote with the same
// attributes, in text and JSON, with and without a halt reason; its source
// is logTransition's.
func TestTransitionLineAsLogAttrs(t *testing.T) {
	t.Parallel()
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	cp := &capsule.Checkpoint{CapsuleID: "01J00000000000000000000000", Key: "k \"quoted\"", TraceID: "0af7651916cd43dd8448eb211c80319c"}
	for _, detail := range []string{"", "absolute_rules_violated: rule 9"} {
		tr := capsule.Transition{Phase: capsule.ReviewPhase, PhaseName: "REVIEW", Cycle: 2, Outcome: capsule.OutcomeHalted, Detail: detail}
		for _, format := range []string{"text", "json"} {
			var got, want bytes.Buffer
			handler := func(w io.Writer, source bool) slog.Handler {
				o := &slog.HandlerOptions{ReplaceAttr: noTime, AddSource: source}
				if format == "json" {
					return slog.NewJSONHandler(w, o)
				}
				return slog.NewTextHandler(w, o)
			}
			p := &Pipeline{log: slog.New(handler(&got, false))}
			p.logTransition(cp, tr, 1500*time.Millisecond)
			attrs := []slog.Attr{slog.String("capsule_id", cp.CapsuleID), slog.String("key", cp.Key), slog.String("phase", tr.PhaseName),
				slog.Int("cycle", tr.Cycle), slog.String("trace_id", cp.TraceID), slog.String("outcome", tr.Outcome),
				slog.Duration("duration", 1500*time.Millisecond)}
			if detail != "" {
				attrs = append(attrs, slog.String("halt_reason", detail))
			}
			slog.New(handler(&want, false)).LogAttrs(context.Background(), slog.LevelInfo, "transition", attrs...)
			require.Equal(t, want.String(), got.String())

			var src bytes.Buffer
			(&Pipeline{log: slog.New(handler(&src, true))}).logTransition(cp, tr, time.Second)
			require.True(t, strings.Contains(src.String(), "pipeline/handle.go"), src.String())
			if format == "json" {
				require.Contains(t, src.String(), `"function":"github.com/sagad/sagad/pipeline.(*Pipeline).logTransition"`)
			}
			n := src.Len()

			(&Pipeline{log: slog.New(slog.NewTextHandler(&src, &slog.HandlerOptions{Level: slog.LevelWarn}))}).logTransition(cp, tr, time.Second)
			require.Equal(t, n, src.Len(), "no line below the level")
		}
	}
}

// BenchmarkLogTransition is the transition's line, text handler.
func BenchmarkLogTransition(b *testing.B) {
	p := &Pipeline{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cp := &capsule.Checkpoint{CapsuleID: "01J00000000000000000000000", Key: "01J00000000000000000000000", TraceID: "0af7651916cd43dd8448eb211c80319c"}
	tr := capsule.Transition{Phase: capsule.ReviewPhase, PhaseName: "REVIEW", Cycle: 1, Outcome: capsule.OutcomePassed}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.logTransition(cp, tr, 3*time.Millisecond)
	}
}
