package logline

import (
	"log/slog"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sagad/sagad/internal/plainjson"
)

// appendTextValue appends v as slog's text handler writes it: strings
// quoted when they need it, numbers, booleans and durations bare, times
// to the millisecond. False for the kinds left to slog.
func appendTextValue(b []byte, v slog.Value) ([]byte, bool) {
	switch v.Kind() {
	case slog.KindString:
		return appendTextString(b, v.String()), true
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10), true
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10), true
	case slog.KindFloat64:
		return strconv.AppendFloat(b, v.Float64(), 'g', -1, 64), true
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool()), true
	case slog.KindDuration:
		return appendDuration(b, v.Duration()), true
	case slog.KindTime:
		return appendRFC3339Millis(b, v.Time())
	}
	return b, false
}

// appendJSONValue appends v as slog's JSON handler writes it, durations
// as strings when h.durText. Floats are left to slog: its JSON handler
// writes them as encoding/json does, and sagad logs none.
func (h *Handler) appendJSONValue(b []byte, v slog.Value) ([]byte, bool) {
	switch v.Kind() {
	case slog.KindString:
		return appendJSONString(b, v.String()), true
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10), true
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10), true
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool()), true
	case slog.KindDuration:
		if h.durText {
			// A duration's String needs no JSON escape.
			b = append(b, '"')
			b = appendDuration(b, v.Duration())
			return append(b, '"'), true
		}
		return strconv.AppendInt(b, int64(v.Duration()), 10), true
	case slog.KindTime:
		// As slog's JSON handler: time.RFC3339Nano between quotes. Where
		// AppendTime declines (a year past 0–9999, an offset of a day or
		// more), slog's handler writes the line.
		return plainjson.AppendTime(b, v.Time())
	}
	return b, false
}

// appendDuration appends d as d.String() writes it ("1h2m3.5s", "1.5ms",
// "0s"), without the string's allocation.
func appendDuration(b []byte, d time.Duration) []byte {
	if d == 0 {
		return append(b, '0', 's')
	}
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u // the two's complement: right for the smallest duration too
	}
	switch {
	case u < uint64(time.Microsecond):
		b = strconv.AppendUint(b, u, 10)
		return append(b, 'n', 's')
	case u < uint64(time.Millisecond):
		b = appendFraction(b, u, 3)
		return append(b, "µs"...)
	case u < uint64(time.Second):
		b = appendFraction(b, u, 6)
		return append(b, 'm', 's')
	}
	secs := u / uint64(time.Second)
	if secs >= 3600 {
		b = strconv.AppendUint(b, secs/3600, 10)
		b = append(b, 'h')
	}
	if secs >= 60 {
		b = strconv.AppendUint(b, secs/60%60, 10)
		b = append(b, 'm')
	}
	b = appendFraction(b, secs%60*uint64(time.Second)+u%uint64(time.Second), 9)
	return append(b, 's')
}

// appendFraction appends u as a decimal with digits places of fraction,
// the fraction's trailing zeros dropped, with its dot when none is left.
func appendFraction(b []byte, u uint64, digits int) []byte {
	scale := uint64(1)
	for range digits {
		scale *= 10
	}
	b = strconv.AppendUint(b, u/scale, 10)
	frac := u % scale
	if frac == 0 {
		return b
	}
	for frac%10 == 0 {
		frac /= 10
		digits--
	}
	b = append(b, '.')
	return appendPadded(b, int(frac), digits)
}

// appendTextString appends s as a text line writes a key or a string
// value: bare when it is not empty and has no space, '=', '"', control
// byte, invalid UTF-8, U+FFFD or non-printing or space rune; otherwise Go
// quoted.
func appendTextString(b []byte, s string) []byte {
	if needsQuote(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// What a byte asks of a text or a JSON line: nothing, a quote (text) or
// an escape (JSON), or, starting a multi-byte sequence, its rune decoded.
const (
	asIs byte = iota
	mark
	multi
)

// textBytes and jsonBytes say what each byte asks of a text line (quote
// it for a control byte, space, '=' or '"'; a backslash and DEL pass bare,
// as slog writes them) and of a JSON line (escape a control byte, '"' or
// '\\').
var textBytes, jsonBytes = func() (text, json [256]byte) {
	for c := range 256 {
		switch {
		case c >= utf8.RuneSelf:
			text[c], json[c] = multi, multi
		case c < ' ':
			text[c], json[c] = mark, mark
		case c == ' ' || c == '=':
			text[c] = mark
		case c == '"':
			text[c], json[c] = mark, mark
		case c == '\\':
			json[c] = mark
		}
	}
	return text, json
}()

// needsQuote reports whether a text line quotes s.
func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		switch textBytes[s[i]] {
		case asIs:
			i++
			continue
		case mark:
			return true
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += n
	}
	return false
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON line writes a string: quoted, with
// '"', '\\' and the control bytes escaped (\n, \r, \t by name, others as
// \u00xx), an invalid byte as \ufffd, U+2028 and U+2029 escaped, and
// everything else (DEL, '<', '>', '&' among it) as is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if what := jsonBytes[c]; what != multi {
			if what == asIs {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += n
			continue
		}
		i += n
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendRFC3339Millis appends t as a text line writes a time: RFC 3339
// with exactly three digits of fraction, truncated, in t's own offset.
// False past the years 0 to 9999, which slog writes its own way.
func appendRFC3339Millis(b []byte, t time.Time) ([]byte, bool) {
	b, ok := appendDateTime(b, t)
	if !ok {
		return b, false
	}
	b = append(b, '.')
	b = appendPadded(b, t.Nanosecond()/int(time.Millisecond), 3)
	return appendOffset(b, t), true
}

// appendDateTime appends "2006-01-02T15:04:05" for t.
func appendDateTime(b []byte, t time.Time) ([]byte, bool) {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return b, false
	}
	hour, minute, sec := t.Clock()
	b = appendPadded(b, year, 4)
	b = append(b, '-')
	b = appendPadded(b, int(month), 2)
	b = append(b, '-')
	b = appendPadded(b, day, 2)
	b = append(b, 'T')
	b = appendPadded(b, hour, 2)
	b = append(b, ':')
	b = appendPadded(b, minute, 2)
	b = append(b, ':')
	b = appendPadded(b, sec, 2)
	return b, true
}

// appendOffset appends t's offset as RFC 3339 writes it: "Z" for UTC,
// otherwise ±hh:mm, seconds of an offset dropped.
func appendOffset(b []byte, t time.Time) []byte {
	_, off := t.Zone()
	if off == 0 {
		return append(b, 'Z')
	}
	minutes := off / 60
	if minutes < 0 {
		b = append(b, '-')
		minutes = -minutes
	} else {
		b = append(b, '+')
	}
	b = appendPadded(b, minutes/60, 2)
	b = append(b, ':')
	return appendPadded(b, minutes%60, 2)
}

// appendPadded appends v (not negative) in decimal, zero-padded to width
// digits.
func appendPadded(b []byte, v, width int) []byte {
	var a [20]byte
	i := len(a)
	for v >= 10 || width > 1 {
		i--
		a[i] = byte('0' + v%10)
		v /= 10
		width--
	}
	i--
	a[i] = byte('0' + v)
	return append(b, a[i:]...)
}
