package logline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// lineCase is one record and the handler that writes it, in a form the
// fuzzer's bytes map onto.
type lineCase struct {
	JSON    bool
	DurText bool       // JSON durations as text, the daemon's JSON option
	Group   bool       // a WithGroup("g") after With: slog's own lines
	Direct  bool       // through HandleAttrs, where the handler is ours
	Level   int8       // the record's level
	Zone    byte       // the record's time's zone (zones); noZone: no time
	TimeN   uint64     // the record's time (timeOf)
	Msg     string     // the record's message
	With    []attrSpec // WithAttrs before the record
	Attrs   []attrSpec // the record's attributes
}

// attrSpec is an attribute: Kind&0x0f its kind (attr), Kind>>4 a time's
// zone.
type attrSpec struct {
	Kind byte
	Key  string
	S    string
	N    uint64
}

const (
	kString byte = iota
	kInt64
	kUint64
	kFloat64
	kBool
	kDuration
	kTime
	kError
	kStruct
	kGroup
	kLogValuer
	kEmpty
	kBytes
	nKinds
)

// zones are the times' zones: UTC, offsets of whole hours, of minutes,
// of seconds (which RFC 3339 drops), past a day, the machine's own.
var zones = []*time.Location{
	time.UTC, time.FixedZone("", -30), time.FixedZone("NPT", 5*3600+45*60), time.FixedZone("", -(3*3600 + 30*60)),
	time.FixedZone("", 14*3600), time.FixedZone("", -12*3600), time.FixedZone("odd", 100*3600+7), time.Local,
	time.FixedZone("", 1), time.FixedZone("", -59), time.FixedZone("", -60), time.FixedZone("UTC", 0),
}

// noZone as a record's zone: a record without a time.
const noZone = 0xff

// timeOf makes a time of years -2 to 10002 (so that the fast path's
// bounds are met on both sides) from n, in zone z.
func timeOf(n uint64, z byte) time.Time {
	const year = 31556952 // seconds in a Gregorian year, on average
	const span = 10004 * year
	// n's top 34 bits the second (times 19, to span the years), its low
	// 30 the nanosecond.
	sec := int64((n>>30)*19%span) - 62167219200 - year // 62167219200: 0000-01-01 before the Unix epoch
	return time.Unix(sec, int64(n&(1<<30-1)%1e9)).In(zones[int(z)%len(zones)])
}

// nOfYear is a timeOf argument for a time in the middle of year y.
func nOfYear(y int) uint64 { return uint64((y+1)*31556952+31556952/2) / 19 << 30 }

type stringer string

func (s stringer) LogValue() slog.Value { return slog.StringValue(string(s)) }

func (a attrSpec) attr() slog.Attr {
	switch a.Kind & 0x0f {
	case kString:
		return slog.String(a.Key, a.S)
	case kInt64:
		return slog.Int64(a.Key, int64(a.N))
	case kUint64:
		return slog.Uint64(a.Key, a.N)
	case kFloat64:
		return slog.Float64(a.Key, math.Float64frombits(a.N))
	case kBool:
		return slog.Bool(a.Key, a.N&1 == 1)
	case kDuration:
		return slog.Duration(a.Key, time.Duration(a.N))
	case kTime:
		return slog.Time(a.Key, timeOf(a.N, a.Kind>>4))
	case kError:
		return slog.Any(a.Key, errors.New(a.S))
	case kStruct:
		return slog.Any(a.Key, struct{ A string }{a.S})
	case kGroup:
		return slog.Group(a.Key, slog.String("in", a.S))
	case kLogValuer:
		return slog.Any(a.Key, stringer(a.S))
	case kEmpty:
		return slog.Attr{}
	default:
		return slog.Any(a.Key, []byte(a.S))
	}
}

func attrsOf(specs []attrSpec) []slog.Attr {
	out := make([]slog.Attr, len(specs))
	for i, s := range specs {
		out[i] = s.attr()
	}
	return out
}

// durationString is the daemon's ReplaceAttr for JSON lines, as it was
// before this package, written here again so that the reference is not
// the code under test.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// write has h, after c's WithAttrs and WithGroup, handle c's record.
func (c lineCase) write(h slog.Handler) {
	if len(c.With) > 0 {
		h = h.WithAttrs(attrsOf(c.With))
	}
	if c.Group {
		h = h.WithGroup("g")
	}
	var tm time.Time
	if c.Zone != noZone {
		tm = timeOf(c.TimeN, c.Zone)
	}
	if lh, ok := h.(*Handler); ok && c.Direct {
		_ = lh.HandleAttrs(context.Background(), tm, slog.Level(c.Level), c.Msg, attrsOf(c.Attrs))
		return
	}
	r := slog.NewRecord(tm, slog.Level(c.Level), c.Msg, 0)
	r.AddAttrs(attrsOf(c.Attrs)...)
	_ = h.Handle(context.Background(), r)
}

func (c lineCase) fast() (string, error) {
	var buf bytes.Buffer
	o := Options{Level: slog.Level(-100), DurationsAsText: c.DurText}
	if c.JSON {
		c.write(NewJSON(&buf, o))
	} else {
		c.write(NewText(&buf, o))
	}
	return buf.String(), nil
}

func (c lineCase) reference() (string, error) {
	var buf bytes.Buffer
	o := &slog.HandlerOptions{Level: slog.Level(-100)}
	if c.JSON {
		if c.DurText {
			o.ReplaceAttr = durationString
		}
		c.write(slog.NewJSONHandler(&buf, o))
	} else {
		c.write(slog.NewTextHandler(&buf, o))
	}
	return buf.String(), nil
}

// lineStrings are strings of every kind a text line quotes or a JSON line
// escapes.
var lineStrings = []string{
	"", "plain", "with space", "a=b", `say "hi"`, `back\slash`, "tab\there", "new\nline", "cr\r", "\x00\x01\x1f",
	"\x7f", "\xff", "\xe2\x82", "\ufffd", "\u2028\u2029", "é", "日本語", "😀", "\u00a0", "\u200b", "\u00ad", "e\u0301",
	"<a&b>", "\b\f", "=", `"`, " ", "01J00000000000000000000000", "0af7651916cd43dd8448eb211c80319c", "REVIEW",
	"absolute_rules_violated: rule 9",
}

// transitionCase is the daemon's transition line.
func transitionCase(json, durText bool) lineCase {
	return lineCase{JSON: json, DurText: durText, Zone: 0, TimeN: 1_795_000_000_123_456_789, Msg: "transition", Attrs: []attrSpec{
		{Kind: kString, Key: "capsule_id", S: "01J00000000000000000000000"}, {Kind: kString, Key: "key", S: "k \"quoted\""},
		{Kind: kString, Key: "phase", S: "REVIEW"}, {Kind: kInt64, Key: "cycle", N: 2},
		{Kind: kString, Key: "trace_id", S: "0af7651916cd43dd8448eb211c80319c"}, {Kind: kString, Key: "outcome", S: "passed"},
		{Kind: kDuration, Key: "duration", N: uint64(1500 * time.Millisecond)},
		{Kind: kString, Key: "halt_reason", S: "absolute_rules_violated: rule 9"},
	}}
}

func lineSeeds() []lineCase {
	var seeds []lineCase
	for _, json := range []bool{false, true} {
		seeds = append(seeds, transitionCase(json, false), transitionCase(json, true))
		for _, s := range lineStrings {
			seeds = append(seeds, lineCase{JSON: json, Msg: s, Zone: noZone, Attrs: []attrSpec{{Kind: kString, Key: s, S: s}}})
		}
		for i, n := range []uint64{0, 1, math.MaxUint64, math.MaxInt64, 1 << 63, uint64(time.Hour + 1), 999, 1000, 999_999, 1_000_000, 59 * 1e9, 3600 * 1e9} {
			seeds = append(seeds, lineCase{JSON: json, DurText: i%2 == 0, Level: int8(i*3 - 8), Zone: byte(i), TimeN: n * 7919, Msg: "numbers",
				With: []attrSpec{{Kind: kInt64, Key: "w", N: n}},
				Attrs: []attrSpec{{Kind: kInt64, Key: "i", N: n}, {Kind: kUint64, Key: "u", N: n}, {Kind: kDuration, Key: "d", N: n},
					{Kind: kDuration, Key: "nd", N: -n}, {Kind: kFloat64, Key: "f", N: n}, {Kind: kBool, Key: "b", N: n},
					{Kind: kTime | byte(i)<<4, Key: "t", N: n * 104729}}})
		}
		for k := kError; k < nKinds; k++ {
			seeds = append(seeds, lineCase{JSON: json, Zone: 1, Msg: "slow", With: []attrSpec{{Kind: k, Key: "w", S: "x y"}}},
				lineCase{JSON: json, Zone: 2, Msg: "slow", Attrs: []attrSpec{{Kind: kString, Key: "a", S: "b"}, {Kind: k, Key: "k", S: "v\n"}}})
		}
		for _, y := range []int{-1, 0, 1, 1969, 2026, 9999, 10001} {
			seeds = append(seeds, lineCase{JSON: json, Zone: byte(y) % 16, TimeN: nOfYear(y), Msg: "year",
				Attrs: []attrSpec{{Kind: kTime | byte(y)<<4, Key: "t", N: nOfYear(y) + 999_999_999}}})
		}
		seeds = append(seeds, lineCase{JSON: json, Group: true, Msg: "grouped", With: []attrSpec{{Key: "w", S: "1"}}, Attrs: []attrSpec{{Key: "a", S: "b"}}})
		for _, f := range []float64{0, math.Copysign(0, -1), 1e21, 1e20, 1e-7, 1e-6, 123.456, math.Inf(1), math.NaN(), math.SmallestNonzeroFloat64} {
			seeds = append(seeds, lineCase{JSON: json, Zone: 3, Msg: "float", Attrs: []attrSpec{{Kind: kFloat64, Key: "f", N: math.Float64bits(f)}}})
		}
	}
	for _, c := range seeds[:len(seeds):len(seeds)] {
		c.Direct = true
		seeds = append(seeds, c)
	}
	return seeds
}

// genString draws a string mostly of plain ASCII with, now and then, a
// piece from lineStrings, so that every way of quoting meets plain bytes
// on either side.
func genString(r *rand.Rand) string {
	var sb strings.Builder
	for n := r.IntN(12); n > 0; n-- {
		if r.IntN(4) == 0 {
			sb.WriteString(lineStrings[r.IntN(len(lineStrings))])
		} else {
			sb.WriteByte(byte(0x20 + r.IntN(0x60)))
		}
	}
	return sb.String()
}

func genAttr(r *rand.Rand) attrSpec {
	k := byte(r.IntN(int(kTime) + 1))
	if r.IntN(20) == 0 {
		k = byte(r.IntN(int(nKinds)))
	}
	n := r.Uint64()
	if r.IntN(2) == 0 {
		n >>= r.IntN(64)
	}
	return attrSpec{Kind: k | byte(r.IntN(len(zones)))<<4, Key: genString(r), S: genString(r), N: n}
}

func genLine(r *rand.Rand) lineCase {
	c := lineCase{JSON: r.IntN(2) == 0, DurText: r.IntN(2) == 0, Group: r.IntN(30) == 0, Direct: r.IntN(2) == 0, Level: int8(r.IntN(24) - 8),
		Zone: byte(r.IntN(len(zones) + 1)), TimeN: r.Uint64(), Msg: genString(r)}
	if c.Zone == byte(len(zones)) {
		c.Zone = noZone
	}
	for n := r.IntN(3); n > 0 && r.IntN(3) == 0; n-- {
		c.With = append(c.With, genAttr(r))
	}
	for n := r.IntN(10); n > 0; n-- {
		c.Attrs = append(c.Attrs, genAttr(r))
	}
	return c
}

// The fuzzer's bytes: flags (1 JSON, 2 DurText, 4 Group, 0x18 the With
// count, 0x20 Direct), level, zone, the time (8 bytes), the message, then attributes
// (kind, key, string, 8 bytes) to the end. A string is a length byte and
// its bytes.
func encodeLine(c lineCase) []byte {
	var flags byte
	if c.JSON {
		flags |= 1
	}
	if c.DurText {
		flags |= 2
	}
	if c.Group {
		flags |= 4
	}
	flags |= byte(min(len(c.With), 3)) << 3
	if c.Direct {
		flags |= 0x20
	}
	b := []byte{flags, byte(c.Level), c.Zone}
	b = binary.BigEndian.AppendUint64(b, c.TimeN)
	b = appendSeedString(b, c.Msg)
	for _, a := range append(append([]attrSpec{}, c.With[:min(len(c.With), 3)]...), c.Attrs...) {
		b = append(b, a.Kind)
		b = appendSeedString(b, a.Key)
		b = appendSeedString(b, a.S)
		b = binary.BigEndian.AppendUint64(b, a.N)
	}
	return b
}

func appendSeedString(b []byte, s string) []byte {
	s = s[:min(len(s), 255)]
	return append(append(b, byte(len(s))), s...)
}

type seedReader struct{ b []byte }

func (r *seedReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *seedReader) string() string {
	n := min(int(r.byte()), len(r.b))
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *seedReader) uint64() uint64 {
	var a [8]byte
	r.b = r.b[copy(a[:], r.b):]
	return binary.BigEndian.Uint64(a[:])
}

func decodeLine(b []byte) (lineCase, bool) {
	if len(b) < 3 {
		return lineCase{}, false
	}
	r := &seedReader{b: b}
	flags := r.byte()
	c := lineCase{JSON: flags&1 != 0, DurText: flags&2 != 0, Group: flags&4 != 0, Direct: flags&0x20 != 0, Level: int8(r.byte()), Zone: r.byte()}
	c.TimeN = r.uint64()
	c.Msg = r.string()
	with := int(flags>>3) & 3
	for len(r.b) > 0 {
		a := attrSpec{Kind: r.byte(), Key: r.string(), S: r.string(), N: r.uint64()}
		if len(c.With) < with {
			c.With = append(c.With, a)
		} else {
			c.Attrs = append(c.Attrs, a)
		}
	}
	return c, true
}

// linePair: a Handler writes exactly the bytes slog's handler with the
// same options writes, whatever the record and the attributes before it.
var linePair = differential.Pair[lineCase, string]{
	Name:      "Line",
	Fast:      lineCase.fast,
	Reference: lineCase.reference,
	Compare: func(t testing.TB, in lineCase, fast, ref string) {
		require.Equal(t, ref, fast, "on %#v", in)
	},
	Seeds:    lineSeeds(),
	Generate: genLine,
	Count:    20000,
	Decode:   decodeLine,
	Encode:   encodeLine,
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{linePair})
}

func FuzzLine(f *testing.F) { differential.Fuzz(f, linePair) }

// TestFastPathTaken: the records of the kinds this package formats are
// formatted by it, not by slog (which would make the pair hold
// trivially), and the others are left to slog.
func TestFastPathTaken(t *testing.T) {
	t.Parallel()
	formats := func(a attrSpec, json bool) bool {
		switch k := a.Kind & 0x0f; {
		case k == kTime:
			y := timeOf(a.N, a.Kind>>4).Year()
			return y >= 0 && y <= 9999
		case k == kFloat64:
			return !json
		default:
			return k < kTime
		}
	}
	fastSeen, slowSeen := 0, 0
	for _, c := range append(lineSeeds(), genLine(rand.New(rand.NewPCG(1, 2)))) {
		for _, json := range []bool{false, true} {
			h := NewText(nil, Options{})
			if json {
				h = NewJSON(nil, Options{})
			}
			want := true
			for _, a := range append(append([]attrSpec{}, c.With...), c.Attrs...) {
				want = want && formats(a, json)
			}
			var hh slog.Handler = h
			if len(c.With) > 0 {
				hh = h.WithAttrs(attrsOf(c.With))
			}
			got := false
			if h2, ok := hh.(*Handler); ok {
				r := slog.NewRecord(time.Now(), slog.LevelInfo, c.Msg, 0)
				r.AddAttrs(attrsOf(c.Attrs)...)
				_, got = h2.appendRecord(nil, r)
			}
			require.Equal(t, want, got, "%#v", c)
			if got {
				fastSeen++
			} else {
				slowSeen++
			}
		}
	}
	require.Greater(t, fastSeen, 50)
	require.Greater(t, slowSeen, 10)
}
