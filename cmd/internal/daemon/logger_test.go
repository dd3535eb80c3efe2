package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoggerWritesSlogLines: sagad's logger writes, for each format and
// level, exactly the lines slog's handlers wrote with the options sagad
// gave them before internal/logline (the level; in JSON, durations as
// text), for the transition line and for lines logline leaves to slog.
func TestLoggerWritesSlogLines(t *testing.T) {
	t.Parallel()
	asText := func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}
	at := time.Date(2026, 11, 29, 6, 37, 35, 123456789, time.UTC)
	records := []slog.Record{
		slog.NewRecord(at, slog.LevelInfo, "transition", 0),
		slog.NewRecord(at, slog.LevelError, "write failed", 0),
		slog.NewRecord(at, slog.LevelDebug, "claimed", 0),
	}
	records[0].AddAttrs(slog.String("capsule_id", "5a6a0000-0000-4000-8000-000000000000"), slog.String("phase", "REVIEW"),
		slog.Int("cycle", 1), slog.String("trace_id", "0af7651916cd43dd8448eb211c80319c"), slog.Duration("duration", 1500*time.Millisecond))
	records[1].AddAttrs(slog.Any("err", errors.New("write: deadline exceeded")), slog.Any("group", slogGroup()))
	records[2].AddAttrs(slog.Bool("adopted", true))
	for _, format := range []string{"text", "json"} {
		for _, level := range []string{"debug", "info", "warn", "error"} {
			var got, want bytes.Buffer
			var l slog.Level
			require.NoError(t, l.UnmarshalText([]byte(level)))
			o := &slog.HandlerOptions{Level: l}
			var ref slog.Handler = slog.NewTextHandler(&want, o)
			if format == "json" {
				o.ReplaceAttr = asText
				ref = slog.NewJSONHandler(&want, o)
			}
			log := newLogger(Config{LogFormat: format, LogLevel: level}, &got)
			for _, r := range records {
				if log.Enabled(context.Background(), r.Level) {
					require.NoError(t, log.Handler().Handle(context.Background(), r))
				}
				if ref.Enabled(context.Background(), r.Level) {
					require.NoError(t, ref.Handle(context.Background(), r))
				}
			}
			require.Equal(t, want.String(), got.String(), "%s at %s", format, level)
			require.NotEmpty(t, got.String())
		}
	}
}
