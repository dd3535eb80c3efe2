package capsule

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrIntegrityMismatch is returned (wrapped) by [VerifyIntegrity] when
// integrity.sha256 is missing or differs from the capsule's [Digest].
var ErrIntegrityMismatch = errors.New(string(CodeIntegrityMismatch))

// ErrInvalidJSON is wrapped by every error [Canonicalize], [Digest], [Seal]
// and [VerifyIntegrity] return for input JCS cannot canonicalize: malformed
// JSON, invalid UTF-8, lone surrogate escapes, duplicate object keys, numbers
// outside IEEE-754 double range, or nesting deeper than 1000 levels.
var ErrInvalidJSON = errors.New("invalid JSON")

// MaxDepth bounds nesting so hostile input cannot exhaust the stack; real
// capsules nest a handful of levels. A container opened at this depth is an
// error of ParseJSON, WalkJSON and the digest alike (and of any walker that
// stands in for them).
const MaxDepth = 1000

// integrityKey is the member [Digest] leaves out and [Seal] fills in.
const integrityKey = "integrity"

// Canonicalize returns the RFC 8785 (JCS) canonical form of the JSON text raw:
// no whitespace, object keys sorted by UTF-16 code units, minimal string
// escaping and numbers written as ECMAScript writes IEEE-754 doubles.
func Canonicalize(raw []byte) ([]byte, error) {
	v, err := parse(raw)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := writeCanonical(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Digest returns the capsule digest of raw, which must be a JSON object: the
// lowercase hex SHA-256 of the canonical form of raw without its top-level
// "integrity" member. Whitespace, key order and number spelling ("4.50" vs
// "4.5") do not change it.
func Digest(raw []byte) (string, error) {
	obj, err := parseObject(raw)
	if err != nil {
		return "", err
	}
	return digestObject(obj)
}

// Seal returns raw with integrity set to {"sha256": Digest(raw)}, replacing
// any previous integrity member. The output is indented with two spaces, has
// sorted keys and a trailing newline, and keeps every number exactly as
// written in raw.
func Seal(raw []byte) ([]byte, error) {
	obj, err := parseObject(raw)
	if err != nil {
		return nil, err
	}
	sum, err := digestObject(obj)
	if err != nil {
		return nil, err
	}
	obj[integrityKey] = map[string]any{"sha256": sum}

	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	// Numbers are json.Number, which the encoder writes verbatim.
	if err := enc.Encode(obj); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return b.Bytes(), nil
}

// VerifyIntegrity checks integrity.sha256 of the capsule raw against its
// [Digest]. It returns an error wrapping [ErrIntegrityMismatch] when the
// member is missing or differs, one wrapping [ErrInvalidJSON] when raw is not
// a JSON object JCS accepts, and nil when the digest matches.
func VerifyIntegrity(raw []byte) error {
	obj, err := parseObject(raw)
	if err != nil {
		return err
	}
	integrity, _ := obj[integrityKey].(map[string]any)
	want, _ := integrity["sha256"].(string)
	got, err := digestObject(obj)
	if err != nil {
		return err
	}
	if want == "" {
		return fmt.Errorf("%w: integrity.sha256 missing", ErrIntegrityMismatch)
	}
	if want != got {
		return fmt.Errorf("%w: integrity.sha256 is %q, content digest is %q", ErrIntegrityMismatch, want, got)
	}
	return nil
}

// ParseJSON decodes raw as RFC 8785 accepts it (valid UTF-8, no duplicate
// keys, no unpaired surrogates) into nil, bool, string, json.Number, []any
// and map[string]any: the form JSON schema validators take, so one parse
// serves both the digest ([DigestObject]) and the schema.
func ParseJSON(raw []byte) (any, error) { return parse(raw) }

// DigestObject is [Digest] of an object [ParseJSON] returned. It does not
// change obj.
func DigestObject(obj map[string]any) (string, error) { return digestObject(obj) }

func parseObject(raw []byte) (map[string]any, error) {
	v, err := parse(raw)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: capsule is not a JSON object", ErrInvalidJSON)
	}
	return obj, nil
}

func digestObject(obj map[string]any) (string, error) {
	bp := canonicalBufs.Get().(*bytes.Buffer)
	defer func() {
		if bp.Cap() <= maxPooledCanonical {
			bp.Reset()
			canonicalBufs.Put(bp)
		}
	}()
	bp.Reset()
	// The top-level object without its integrity member, written in place
	// rather than copied into a second map (RECEPTION digests every capsule).
	if err := writeCanonicalObject(bp, obj, integrityKey); err != nil {
		return "", err
	}
	sum := sha256.Sum256(bp.Bytes())
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	return string(digits[:]), nil // one allocation: EncodeToString makes two
}

// canonicalBufs recycles digest encodings; one larger than
// maxPooledCanonical (a capsule near its size limit) is left to the GC.
var canonicalBufs = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 4096)) }}

const maxPooledCanonical = 64 << 10

// parse decodes one JSON value into nil, bool, string, json.Number, []any and
// map[string]any, rejecting what RFC 8785 (through I-JSON) rejects.
func parse(raw []byte) (any, error) {
	s := scanner{b: raw}
	return s.document()
}

// document is parse of s.b, with s's options.
func (s *scanner) document() (any, error) {
	// encoding/json silently replaces invalid UTF-8 with U+FFFD.
	if !utf8.Valid(s.b) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrInvalidJSON)
	}
	// The decoded strings and numbers are never longer than the text
	// (an escape is longer than what it stands for; invalid UTF-8, whose
	// U+FFFD would be longer, was refused above). The room is bounded: a
	// string kept from the value (a checkpoint's key, a metric's label)
	// keeps all of it alive, so a large capsule's strings past the first
	// maxSharedText bytes are allocated alone.
	s.texts.Grow(min(len(s.b), maxSharedText))
	v, err := s.value(0)
	if err != nil {
		return nil, err
	}
	s.skipSpace()
	if s.i != len(s.b) {
		return nil, fmt.Errorf("%w: data after the top-level value", ErrInvalidJSON)
	}
	if err := checkSurrogates(s.b); err != nil {
		return nil, err
	}
	return v, nil
}

// checkSurrogates rejects \u escapes of unpaired UTF-16 surrogates, which
// encoding/json would silently turn into U+FFFD. It runs on JSON the decoder
// has accepted, where a backslash only ever starts an escape inside a string.
func checkSurrogates(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		// Straight to the next backslash: a capsule has few or none, and
		// IndexByte passes the rest many bytes at a time.
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			return nil
		}
		i += j + 1
		if raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1 : i+5])
		i += 4
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo := hex4(raw[i+3 : i+7]); lo >= 0xDC00 && lo < 0xE000 {
					i += 6
					continue
				}
			}
			return fmt.Errorf("%w: unpaired high surrogate \\u%04x", ErrInvalidJSON, r)
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Errorf("%w: unpaired low surrogate \\u%04x", ErrInvalidJSON, r)
		}
	}
	return nil
}

func hex4(b []byte) rune {
	n, err := strconv.ParseUint(string(b), 16, 16)
	if err != nil {
		return utf8.RuneError
	}
	return rune(n)
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case string:
		writeString(b, v)
	case json.Number:
		if plainInteger(v) {
			// Its own canonical form: as ECMAScript writes the double it
			// is exactly, without reading and formatting it again.
			b.WriteString(string(v))
			return nil
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return fmt.Errorf("%w: number %s is outside IEEE-754 double range", ErrInvalidJSON, v)
		}
		b.WriteString(formatNumber(f))
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		return writeCanonicalObject(b, v, "")
	default:
		return fmt.Errorf("canonicalize: unexpected %T", v)
	}
	return nil
}

// writeCanonicalObject writes v with its members sorted by the UTF-16 code
// units of their names (RFC 8785 §3.2.3), leaving out the member named skip
// ("" leaves out none).
func writeCanonicalObject(b *bytes.Buffer, v map[string]any, skip string) error {
	// Room on the stack for a capsule's objects (its top level has 13 to
	// 19 members): no allocation, and no write barrier for each name.
	var room [24]member
	members := sortMembers(room[:0], v, skip)
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, m.name)
		b.WriteByte(':')
		if err := writeCanonical(b, m.value); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// member is one member of an object, its value taken with its name so the
// sorted names need no second lookup.
type member struct {
	name  string
	value any
}

// sortMembers appends v's members but skip to out, sorted as RFC 8785 asks.
func sortMembers(out []member, v map[string]any, skip string) []member {
	ascii := true
	for k, e := range v {
		if skip != "" && k == skip {
			continue
		}
		out = append(out, member{k, e})
		ascii = ascii && isASCII(k)
	}
	if ascii {
		// For ASCII names a UTF-16 unit is the byte: byte order is the
		// order RFC 8785 asks for, without encoding each name again.
		slices.SortFunc(out, func(x, y member) int { return strings.Compare(x.name, y.name) })
		return out
	}
	units := make(map[string][]uint16, len(out))
	for _, m := range out {
		units[m.name] = utf16.Encode([]rune(m.name))
	}
	slices.SortFunc(out, func(x, y member) int { return slices.Compare(units[x.name], units[y.name]) })
	return out
}

// plainInteger reports whether n is an integer written in at most 15 digits
// without a sign, fraction or exponent: a double holds it exactly, and
// ECMAScript writes that double as these digits. ("-0" and other negatives
// take the general path: -0 is written "0".)
func plainInteger(n json.Number) bool { return plainDigits(n) }

// plainDigits is plainInteger for a number as written, string or bytes.
func plainDigits[T ~string | ~[]byte](n T) bool {
	if len(n) == 0 || len(n) > 15 || (n[0] == '0' && len(n) > 1) {
		return false
	}
	for i := 0; i < len(n); i++ {
		if !isDigit(n[i]) {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// writeString writes s quoted as RFC 8785 §3.2.2.2 requires: the two-character
// escapes where JSON has them, \u00xx for other control characters and
// everything else as literal UTF-8.
func writeString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	// Runs of characters written as they are (printable ASCII other than
	// '"' and '\\', and all of UTF-8 beyond) go out in one write.
	start := 0
	for i, r := range s {
		if r == utf8.RuneError {
			// Invalid UTF-8 (never from the parser) is written as U+FFFD,
			// as a rune-by-rune write would.
			_, w := utf8.DecodeRuneInString(s[i:])
			b.WriteString(s[start:i])
			b.WriteRune(r)
			start = i + w
			continue
		}
		if r >= 0x20 && r != '"' && r != '\\' {
			continue
		}
		b.WriteString(s[start:i])
		start = i + 1 // every rune escaped here is one byte
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[r>>4])
			b.WriteByte(hexDigits[r&0xf])
		}
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// formatNumber writes f as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString, which RFC 8785 §3.2.2.3 adopts): the shortest
// digits that round-trip, plain notation for 1e-7 < |f| < 1e21 and exponent
// notation ("1e+21", "1.5e-7") outside it.
func formatNumber(f float64) string {
	if f == 0 {
		return "0" // also -0
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// strconv's shortest round-trip digits, as "d.ddde±xx".
	mant, exp, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k, n := len(digits), x+1 // ECMA-262's k and n: f = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	s := sign + digits[:1]
	if k > 1 {
		s += "." + digits[1:]
	}
	if n-1 >= 0 {
		return s + "e+" + strconv.Itoa(n-1)
	}
	return s + "e-" + strconv.Itoa(1-n)
}
