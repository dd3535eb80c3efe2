package logline_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/logline"
)

// exclusiveWriter fails the test when two Writes overlap: a handler's
// lines must reach its writer one Write at a time.
type exclusiveWriter struct {
	busy    atomic.Bool
	overlap atomic.Bool
	buf     bytes.Buffer
}

func (w *exclusiveWriter) Write(p []byte) (int, error) {
	if !w.busy.CompareAndSwap(false, true) {
		w.overlap.Store(true)
	}
	defer w.busy.Store(false)
	// bytes.Buffer is not safe for concurrent use: without the handler's
	// lock, -race reports these writes too.
	return w.buf.Write(p)
}

// TestConcurrentLines: goroutines writing through one handler, handlers
// WithAttrs derives and records slog formats (an error, a group), in
// text and JSON, write whole lines, each once, none interleaved.
func TestConcurrentLines(t *testing.T) {
	t.Parallel()
	for _, json := range []bool{false, true} {
		w := &exclusiveWriter{}
		var h slog.Handler = logline.NewText(w, logline.Options{})
		if json {
			h = logline.NewJSON(w, logline.Options{DurationsAsText: true})
		}
		handlers := []slog.Handler{h, h.WithAttrs([]slog.Attr{slog.String("with", "a b")}), h.WithGroup("g"),
			h.WithAttrs([]slog.Attr{slog.Any("err", errors.New("boom"))})}
		const goroutines, lines = 8, 200
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				l := slog.New(handlers[g%len(handlers)])
				for i := range lines {
					if i%3 == 0 {
						l.Info("slow", "err", errors.New("e"), "i", i)
						continue
					}
					l.Info("transition", "capsule_id", "c", "cycle", i, "duration", time.Duration(i)*time.Millisecond)
				}
			})
		}
		wg.Wait()
		require.False(t, w.overlap.Load(), "two Writes overlapped")
		got := strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n")
		require.Len(t, got, goroutines*lines)
		for _, line := range got {
			if json {
				require.True(t, strings.HasPrefix(line, `{"time":`) && strings.HasSuffix(line, "}"), line)
			} else {
				require.True(t, strings.HasPrefix(line, "time="), line)
			}
		}
	}
}

// TestEnabled: the handler's level is slog's, for every level around it
// and for a LevelVar changed after the handler was made.
func TestEnabled(t *testing.T) {
	t.Parallel()
	var lv slog.LevelVar
	lv.Set(slog.LevelWarn)
	for _, o := range []logline.Options{{}, {Level: slog.LevelDebug}, {Level: slog.LevelError}, {Level: &lv}} {
		ours := logline.NewText(io.Discard, o)
		theirs := slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: o.Level})
		for l := slog.LevelDebug - 2; l <= slog.LevelError+2; l++ {
			require.Equal(t, theirs.Enabled(context.Background(), l), ours.Enabled(context.Background(), l), "level %v, options %+v", l, o)
		}
	}
	h := logline.NewJSON(io.Discard, logline.Options{Level: &lv})
	lv.Set(slog.LevelDebug)
	require.True(t, h.Enabled(context.Background(), slog.LevelDebug))
}

// transitionRecord is the daemon's transition line.
func transitionRecord() slog.Record {
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "transition", 0)
	r.AddAttrs(slog.String("capsule_id", "01J00000000000000000000000"), slog.String("key", "01J00000000000000000000000"),
		slog.String("phase", "REVIEW"), slog.Int("cycle", 1), slog.String("trace_id", "0af7651916cd43dd8448eb211c80319c"),
		slog.String("outcome", "passed"), slog.Duration("duration", 3*time.Millisecond))
	return r
}

// BenchmarkTransitionLine is one transition line through slog's handlers
// and through ours, with the daemon's options.
func BenchmarkTransitionLine(b *testing.B) {
	for _, c := range []struct {
		name string
		h    slog.Handler
	}{
		{"text/slog", slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})},
		{"text/logline", logline.NewText(io.Discard, logline.Options{Level: slog.LevelInfo})},
		{"json/slog", slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: logline.DurationString})},
		{"json/logline", logline.NewJSON(io.Discard, logline.Options{Level: slog.LevelInfo, DurationsAsText: true})},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := transitionRecord()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = c.h.Handle(ctx, r)
			}
		})
	}
}

// panickyWriter panics at its first Write, as a writer a caller recovers
// from may, and writes the others.
type panickyWriter struct {
	calls atomic.Int32
	buf   bytes.Buffer
}

func (w *panickyWriter) Write(p []byte) (int, error) {
	if w.calls.Add(1) == 1 {
		panic("writer broke")
	}
	return w.buf.Write(p)
}

// TestWriterPanicReleasesLock: a Write that panics (and is recovered by
// the caller) leaves the handler able to write, as slog's handler is (it
// unlocks in a defer); a lock left held would stop every later line of
// the process, ours and the fallback's, forever.
func TestWriterPanicReleasesLock(t *testing.T) {
	t.Parallel()
	for _, json := range []bool{false, true} {
		w := &panickyWriter{}
		var h slog.Handler = logline.NewText(w, logline.Options{})
		if json {
			h = logline.NewJSON(w, logline.Options{})
		}
		l := slog.New(h)
		require.Panics(t, func() { l.Info("first") })
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.Info("second", "n", 1)
			l.Info("third", "err", errors.New("slog formats it"))
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's lock stayed held after the writer panicked")
		}
		require.Contains(t, w.buf.String(), "second")
		require.Contains(t, w.buf.String(), "third")
	}
}
