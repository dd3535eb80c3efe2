package pipeline

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/logline"
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

// TestTransitionLineThroughLogline: through sagad's own handler
// (internal/logline), which takes the attributes without a record, the
// transition's line is slog's handler's, in text and JSON, with and
// without a halt reason, but for the time (logline's pair holds that).
func TestTransitionLineThroughLogline(t *testing.T) {
	t.Parallel()
	noTime := regexp.MustCompile(`^time=\S+ |"time":"[^"]*",`)
	cp := &capsule.Checkpoint{CapsuleID: "01J00000000000000000000000", Key: "k \"quoted\"", TraceID: "0af7651916cd43dd8448eb211c80319c"}
	for _, detail := range []string{"", "absolute_rules_violated: rule 9"} {
		tr := capsule.Transition{Phase: capsule.ReviewPhase, PhaseName: "REVIEW", Cycle: 2, Outcome: capsule.OutcomeHalted, Detail: detail}
		for _, json := range []bool{false, true} {
			var got, want bytes.Buffer
			ours, theirs := slog.Handler(logline.NewText(&got, logline.Options{})), slog.Handler(slog.NewTextHandler(&want, nil))
			if json {
				ours = logline.NewJSON(&got, logline.Options{DurationsAsText: true})
				theirs = slog.NewJSONHandler(&want, &slog.HandlerOptions{ReplaceAttr: logline.DurationString})
			}
			(&Pipeline{log: slog.New(ours)}).logTransition(cp, tr, 1500*time.Millisecond)
			(&Pipeline{log: slog.New(theirs)}).logTransition(cp, tr, 1500*time.Millisecond)
			require.NotEqual(t, want.String(), noTime.ReplaceAllString(want.String(), ""), "the line has a time")
			require.Equal(t, noTime.ReplaceAllString(want.String(), ""), noTime.ReplaceAllString(got.String(), ""))

			n := got.Len()
			(&Pipeline{log: slog.New(logline.NewText(&got, logline.Options{Level: slog.LevelWarn}))}).logTransition(cp, tr, time.Second)
			require.Equal(t, n, got.Len(), "no line below the level")
		}
	}
}

// BenchmarkLogTransition is the transition's line through slog's text
// handler and through sagad's own (internal/logline).
func BenchmarkLogTransition(b *testing.B) {
	cp := &capsule.Checkpoint{CapsuleID: "01J00000000000000000000000", Key: "01J00000000000000000000000", TraceID: "0af7651916cd43dd8448eb211c80319c"}
	tr := capsule.Transition{Phase: capsule.ReviewPhase, PhaseName: "REVIEW", Cycle: 1, Outcome: capsule.OutcomePassed}
	for _, c := range []struct {
		name string
		h    slog.Handler
	}{
		{"slog", slog.NewTextHandler(io.Discard, nil)},
		{"logline", logline.NewText(io.Discard, logline.Options{})},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := &Pipeline{log: slog.New(c.h)}
			b.ReportAllocs()
			for b.Loop() {
				p.logTransition(cp, tr, 3*time.Millisecond)
			}
		})
	}
}
