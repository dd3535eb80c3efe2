package logline

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/sagad/sagad/internal/plainjson"
)

// Options configures a [Handler].
type Options struct {
	// Level is the lowest level written. Defaults to slog.LevelInfo.
	Level slog.Leveler
	// DurationsAsText writes a duration in a JSON line as its String,
	// "1.5s", as the text line does, rather than as slog's JSON handler
	// does, in nanoseconds. The slog handler a record falls back to gets
	// the ReplaceAttr [DurationString] for it. Text lines ignore it.
	DurationsAsText bool
}

// Handler is a slog.Handler writing exactly what slog's text or JSON
// handler writes with the same level (and, with DurationsAsText,
// ReplaceAttr [DurationString]). It is safe for concurrent use: every
// line is one Write, under a lock shared by the handlers WithAttrs derives
// and by the slog handler it falls back to.
type Handler struct {
	json     bool
	durText  bool
	level    slog.Leveler
	w        io.Writer
	mu       *sync.Mutex
	attrs    []byte       // the WithAttrs attributes, formatted, each with its separator
	fallback slog.Handler // slog's handler, with the same options and attributes
}

// NewText returns a handler writing the lines of slog.NewTextHandler(w,
// &slog.HandlerOptions{Level: o.Level}).
func NewText(w io.Writer, o Options) *Handler { return newHandler(w, o, false) }

// NewJSON returns a handler writing the lines of slog.NewJSONHandler(w,
// &slog.HandlerOptions{Level: o.Level}), with ReplaceAttr DurationString
// when o.DurationsAsText.
func NewJSON(w io.Writer, o Options) *Handler { return newHandler(w, o, true) }

func newHandler(w io.Writer, o Options, json bool) *Handler {
	if o.Level == nil {
		o.Level = slog.LevelInfo
	}
	h := &Handler{json: json, durText: json && o.DurationsAsText, level: o.Level, w: w, mu: &sync.Mutex{}}
	so := &slog.HandlerOptions{Level: o.Level}
	// slog's handler writes through h's lock, so that its lines and h's
	// never interleave on a writer that is not safe for concurrent use.
	lw := lockedWriter{mu: h.mu, w: w}
	if json {
		if h.durText {
			so.ReplaceAttr = DurationString
		}
		h.fallback = slog.NewJSONHandler(lw, so)
	} else {
		h.fallback = slog.NewTextHandler(lw, so)
	}
	return h
}

// DurationString is the ReplaceAttr that writes a duration as its String
// ("1.5s"): slog's JSON handler would write nanoseconds, a bare integer
// nobody reads as time.
func DurationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// Enabled reports whether level is at or above the handler's level.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.level.Level()
}

// WithAttrs returns a handler whose lines carry attrs after the message,
// formatted once here; when one of them is not a kind this package
// formats, the returned handler is slog's.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	fb := h.fallback.WithAttrs(attrs)
	pre := append([]byte(nil), h.attrs...)
	for _, a := range attrs {
		var ok bool
		if pre, ok = h.appendAttr(pre, a); !ok {
			return fb
		}
	}
	h2 := *h
	h2.attrs = pre
	h2.fallback = fb
	return &h2
}

// WithGroup returns slog's handler with the group: records in groups are
// rare enough to be left to it.
func (h *Handler) WithGroup(name string) slog.Handler {
	return h.fallback.WithGroup(name)
}

var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooled bounds the buffers kept for reuse: one huge line must not pin
// its buffer.
const maxPooled = 16 << 10

// Handle writes r as one line, or has slog's handler write it when r has
// a value this package does not format.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	bp := buffers.Get().(*[]byte)
	b, ok := h.appendRecord((*bp)[:0], r)
	if !ok {
		buffers.Put(bp)
		return h.fallback.Handle(ctx, r)
	}
	return h.write(bp, b)
}

// appendRecord appends r's line to b; false when a value needs slog's
// handler.
func (h *Handler) appendRecord(b []byte, r slog.Record) ([]byte, bool) {
	b, ok := h.appendHead(b, r.Time, r.Level, r.Message)
	if !ok {
		return b, false
	}
	r.Attrs(func(a slog.Attr) bool {
		b, ok = h.appendAttr(b, a)
		return ok
	})
	return h.appendEnd(b), ok
}

// HandleAttrs writes what Handle writes for a record of t, level, msg and
// attrs (and no source): the caller that has its attributes in an array
// saves the record's copy of them, an allocation past five.
func (h *Handler) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	bp := buffers.Get().(*[]byte)
	b, ok := h.appendHead((*bp)[:0], t, level, msg)
	for i := 0; ok && i < len(attrs); i++ {
		b, ok = h.appendAttr(b, attrs[i])
	}
	if !ok {
		buffers.Put(bp)
		r := slog.NewRecord(t, level, msg, 0)
		r.AddAttrs(attrs...)
		return h.fallback.Handle(ctx, r)
	}
	return h.write(bp, h.appendEnd(b))
}

// write writes the line b, one Write under the lock, and keeps its
// buffer bp for the next line.
func (h *Handler) write(bp *[]byte, b []byte) error {
	err := h.writeLocked(b)
	if cap(b) <= maxPooled {
		*bp = b
		buffers.Put(bp)
	}
	return err
}

// appendHead appends a line's time (unless zero), level, message and the
// WithAttrs attributes; false when the time needs slog's handler.
func (h *Handler) appendHead(b []byte, t time.Time, level slog.Level, msg string) ([]byte, bool) {
	ok := true
	if h.json {
		b = append(b, '{')
		if !t.IsZero() {
			b = append(b, `"time":`...)
			if b, ok = plainjson.AppendTime(b, t); !ok {
				return b, false
			}
			b = append(b, ',')
		}
		b = append(b, `"level":`...)
		b = appendJSONString(b, level.String())
		b = append(b, `,"msg":`...)
		b = appendJSONString(b, msg)
	} else {
		if !t.IsZero() {
			b = append(b, "time="...)
			if b, ok = appendRFC3339Millis(b, t); !ok {
				return b, false
			}
			b = append(b, ' ')
		}
		b = append(b, "level="...)
		b = appendTextString(b, level.String())
		b = append(b, " msg="...)
		b = appendTextString(b, msg)
	}
	return append(b, h.attrs...), true
}

// appendEnd ends a line.
func (h *Handler) appendEnd(b []byte) []byte {
	if h.json {
		b = append(b, '}')
	}
	return append(b, '\n')
}

// appendAttr appends a with its leading separator; false when its value
// is not one this package formats.
func (h *Handler) appendAttr(b []byte, a slog.Attr) ([]byte, bool) {
	if h.json {
		b = append(b, ',')
		b = appendJSONString(b, a.Key)
		b = append(b, ':')
		return h.appendJSONValue(b, a.Value)
	}
	b = append(b, ' ')
	b = appendTextString(b, a.Key)
	b = append(b, '=')
	return appendTextValue(b, a.Value)
}

// writeLocked writes b under the lock, released in a defer as slog's
// handler releases its own: a writer that panics, recovered above, must
// not leave every later line of the process waiting for the lock.
func (h *Handler) writeLocked(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b)
	return err
}

// lockedWriter is the writer of the slog handler a Handler falls back to.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
