package capsule

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// Digest is [DigestObject] of the document's value, an error when it is not
// an object. A text already in canonical form but for its whitespace (as
// [Seal], sagactl and canonicalising producers write capsules) is hashed
// from its own bytes, without walking the value: its members sorted, each
// string and number spelled as RFC 8785 spells it. Any other text takes
// DigestObject's path; both give the same digest (FuzzDocumentDigest).
func (d *Document) Digest() (string, error) {
	obj, isObj := d.Value.(map[string]any)
	if !isObj {
		return "", fmt.Errorf("%w: capsule is not a JSON object", ErrInvalidJSON)
	}
	bp := canonicalBufs.Get().(*bytes.Buffer)
	defer func() {
		if bp.Cap() <= maxPooledCanonical {
			bp.Reset()
			canonicalBufs.Put(bp)
		}
	}()
	bp.Reset()
	w := textWalker{b: d.raw, out: bp}
	if !w.value(true) {
		return digestObject(obj)
	}
	sum := sha256.Sum256(bp.Bytes())
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	return string(digits[:]), nil
}

// textWalker copies a text the strict parse accepted (valid JSON and UTF-8,
// no repeated names) to out without its whitespace and the top-level
// integrity member, and reports false at the first thing whose canonical
// form is spelled otherwise: a member out of order, a name with an escape
// or beyond ASCII (ordered by UTF-16 units, not bytes), an escape RFC 8785
// writes differently, a number not in ECMAScript's spelling.
type textWalker struct {
	b   []byte
	i   int
	out *bytes.Buffer
}

func (w *textWalker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value copies the value at w.i; top is true for the document itself.
func (w *textWalker) value(top bool) bool {
	w.space()
	switch c := w.b[w.i]; c {
	case '{':
		return w.object(top)
	case '[':
		return w.array()
	case '"':
		return w.str()
	case 't', 'n':
		return w.literal(4)
	case 'f':
		return w.literal(5)
	}
	return w.number()
}

func (w *textWalker) literal(n int) bool {
	w.out.Write(w.b[w.i : w.i+n])
	w.i += n
	return true
}

func (w *textWalker) object(top bool) bool {
	w.i++ // '{'
	w.out.WriteByte('{')
	var prev []byte
	written := 0
	for {
		w.space()
		switch w.b[w.i] {
		case '}':
			w.i++
			w.out.WriteByte('}')
			return true
		case ',':
			w.i++
			w.space()
		}
		name, ok := w.name()
		if !ok || (prev != nil && bytes.Compare(prev, name) >= 0) {
			return false
		}
		prev = name
		skip := top && string(name) == integrityKey
		if !w.member(name, skip, written > 0) {
			return false
		}
		if !skip {
			written++
		}
	}
}

// member copies the colon and value of the member name (w.i is past the
// name), after a comma when it is not the first written; skip leaves it out
// (the digest's integrity member).
func (w *textWalker) member(name []byte, skip, comma bool) bool {
	mark := w.out.Len()
	if comma {
		w.out.WriteByte(',')
	}
	w.out.WriteByte('"')
	w.out.Write(name)
	w.out.WriteString(`":`)
	w.space()
	w.i++ // ':'
	if !w.value(false) {
		return false
	}
	if skip {
		w.out.Truncate(mark)
	}
	return true
}

// name reads a member name at w.i (its opening quote): ok only for ASCII
// without escapes, whose byte order is RFC 8785's.
func (w *textWalker) name() (name []byte, ok bool) {
	start := w.i + 1
	for w.i = start; w.b[w.i] != '"'; w.i++ {
		if c := w.b[w.i]; c == '\\' || c >= 0x80 {
			return nil, false
		}
	}
	w.i++
	return w.b[start : w.i-1], true
}

func (w *textWalker) array() bool {
	w.i++ // '['
	w.out.WriteByte('[')
	for first := true; ; first = false {
		w.space()
		switch w.b[w.i] {
		case ']':
			w.i++
			w.out.WriteByte(']')
			return true
		case ',':
			w.i++
		}
		if !first {
			w.out.WriteByte(',')
		}
		if !w.value(false) {
			return false
		}
	}
}

// str copies a string whose escapes are the ones writeString writes: the
// two-character ones JSON has (but \/), and \u00xx in lower case for the
// other control characters.
func (w *textWalker) str() bool {
	start := w.i
	for w.i++; w.b[w.i] != '"'; w.i++ {
		if w.b[w.i] != '\\' {
			continue
		}
		w.i++
		switch w.b[w.i] {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if !canonicalU(w.b[w.i+1 : w.i+5]) {
				return false
			}
			w.i += 4
		default:
			return false
		}
	}
	w.i++
	w.out.Write(w.b[start:w.i])
	return true
}

// canonicalU reports whether the four hex digits of a \u escape are how
// writeString escapes a control character: 00 then two lower-case digits,
// for one without a two-character escape.
func canonicalU(h []byte) bool {
	lower := func(c byte) bool { return isDigit(c) || (c >= 'a' && c <= 'f') }
	if h[0] != '0' || h[1] != '0' || (h[2] != '0' && h[2] != '1') || !lower(h[3]) {
		return false
	}
	switch string(h) {
	case "0008", "0009", "000a", "000c", "000d":
		return false
	}
	return true
}

// number copies a number spelled as formatNumber writes it.
func (w *textWalker) number() bool {
	start := w.i
	for w.i < len(w.b) && isNumberByte(w.b[w.i]) {
		w.i++
	}
	lit := w.b[start:w.i]
	if !canonicalInteger(lit) {
		// Rare in a capsule (a fractional budget): read and written again.
		f, err := strconv.ParseFloat(string(lit), 64)
		if err != nil || formatNumber(f) != string(lit) {
			return false
		}
	}
	w.out.Write(lit)
	return true
}

func isNumberByte(c byte) bool {
	return isDigit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// canonicalInteger reports whether lit is an integer of at most 15 digits,
// signed or not, with no leading zero and not -0: ECMAScript writes the
// double it is as these bytes.
func canonicalInteger(lit []byte) bool {
	digits := lit
	if len(lit) > 0 && lit[0] == '-' {
		digits = lit[1:]
		if string(digits) == "0" {
			return false
		}
	}
	return plainDigits(digits)
}
