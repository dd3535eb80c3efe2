package rules

import (
	"fmt"
	"unicode/utf8"

	"github.com/sagad/sagad/capsule"
)

// errSpanWalk is what walkJSONSpans returns for any syntax error. Rule 9
// only asks whether the walk failed (it then scans the bytes as text), so
// the error does not repeat capsule.WalkJSON's wording.
var errSpanWalk = fmt.Errorf("%w: rules: not a JSON document", capsule.ErrInvalidJSON)

// text is a document a span walk reads: the bytes as received (Rule 9's
// walk: no copy of them) or a string (the form the walk was first written
// for, which its differential pair still runs).
type text interface{ ~string | ~[]byte }

// spanWalker is capsule.WalkJSON over a document held in one piece: a
// member name or string value without escapes or invalid UTF-8 (nearly all
// of a capsule's) is handed on as a span of the document, not copied, and
// numbers are checked without being converted. Rule 9 walks every
// capsule's strings at AUTOMATED_GATES, and the walk's one string per token
// was most of its allocation. TestSpanWalkMatchesWalkJSON holds the two
// walks to the same tokens, errors and the tokens before an error, over
// either form of the document.
type spanWalker[D text] struct {
	doc D
	i   int
}

// walkJSONSpans calls fn for every token of doc as capsule.WalkJSON does
// for []byte(doc): the same tokens in the same order, the same strings, an
// error (errSpanWalk) exactly where WalkJSON returns one, after the same
// tokens. The spans fn gets may be parts of doc, valid only during the
// call: fn copies what it keeps. fn is passed down the walk rather than
// kept in spanWalker, so that a caller's closure does not escape to the
// heap.
func walkJSONSpans[D text](doc D, fn func(capsule.JSONToken, D)) error {
	w := spanWalker[D]{doc: doc}
	for w.skipSpace(); w.i < len(w.doc); w.skipSpace() {
		if err := w.value(0, fn); err != nil {
			return err
		}
	}
	return nil
}

func (w *spanWalker[D]) skipSpace() {
	for w.i < len(w.doc) {
		switch w.doc[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value walks one value at w.i (after spaces), as capsule's scanner.walk.
func (w *spanWalker[D]) value(depth int, fn func(capsule.JSONToken, D)) error {
	w.skipSpace()
	if w.i >= len(w.doc) {
		return errSpanWalk
	}
	var (
		err  error
		none D
	)
	switch c := w.doc[w.i]; {
	case c == '{' || c == '[':
		if depth >= capsule.MaxDepth {
			return errSpanWalk
		}
		return w.container(depth, c == '{', fn)
	case c == '"':
		s, err := w.str()
		if err != nil {
			return err
		}
		fn(capsule.TokenString, s)
		return nil
	case c == '-' || isDigit(c):
		err = w.number()
	case c == 't':
		err = w.literal("true")
	case c == 'f':
		err = w.literal("false")
	case c == 'n':
		err = w.literal("null")
	default:
		err = errSpanWalk
	}
	if err != nil {
		return err
	}
	fn(capsule.TokenScalar, none)
	return nil
}

// container walks an object or array at w.i: its start token at once, a
// member's name before its ':' is checked, its end token after its last
// element, as capsule's scanner.walk reports them.
func (w *spanWalker[D]) container(depth int, object bool, fn func(capsule.JSONToken, D)) error {
	end, startTok, endTok := byte(']'), capsule.TokenArrayStart, capsule.TokenArrayEnd
	if object {
		end, startTok, endTok = '}', capsule.TokenObjectStart, capsule.TokenObjectEnd
	}
	var none D
	w.i++
	fn(startTok, none)
	w.skipSpace()
	if w.i < len(w.doc) && w.doc[w.i] == end {
		w.i++
		fn(endTok, none)
		return nil
	}
	for {
		if object {
			if err := w.memberName(fn); err != nil {
				return err
			}
		}
		if err := w.value(depth+1, fn); err != nil {
			return err
		}
		w.skipSpace()
		if w.i >= len(w.doc) {
			return errSpanWalk
		}
		switch w.doc[w.i] {
		case ',':
			w.i++
		case end:
			w.i++
			fn(endTok, none)
			return nil
		default:
			return errSpanWalk
		}
	}
}

// memberName walks `"name" :` and reports the name.
func (w *spanWalker[D]) memberName(fn func(capsule.JSONToken, D)) error {
	w.skipSpace()
	if w.i >= len(w.doc) || w.doc[w.i] != '"' {
		return errSpanWalk
	}
	key, err := w.str()
	if err != nil {
		return err
	}
	fn(capsule.TokenKey, key)
	w.skipSpace()
	if w.i >= len(w.doc) || w.doc[w.i] != ':' {
		return errSpanWalk
	}
	w.i++
	return nil
}

func (w *spanWalker[D]) literal(word string) error {
	if len(w.doc)-w.i < len(word) {
		return errSpanWalk
	}
	for j := 0; j < len(word); j++ {
		if w.doc[w.i+j] != word[j] {
			return errSpanWalk
		}
	}
	w.i += len(word)
	return nil
}

// number checks the number at w.i with capsule's grammar (RFC 8259's):
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, stopping where it stops.
func (w *spanWalker[D]) number() error {
	if w.doc[w.i] == '-' {
		w.i++
	}
	switch {
	case w.i < len(w.doc) && w.doc[w.i] == '0':
		w.i++
	case w.i < len(w.doc) && '1' <= w.doc[w.i] && w.doc[w.i] <= '9':
		w.digits()
	default:
		return errSpanWalk
	}
	if w.i < len(w.doc) && w.doc[w.i] == '.' {
		w.i++
		if w.digits() == 0 {
			return errSpanWalk
		}
	}
	if w.i < len(w.doc) && (w.doc[w.i] == 'e' || w.doc[w.i] == 'E') {
		w.i++
		if w.i < len(w.doc) && (w.doc[w.i] == '+' || w.doc[w.i] == '-') {
			w.i++
		}
		if w.digits() == 0 {
			return errSpanWalk
		}
	}
	return nil
}

// digits skips a run of digits and says how long it was.
func (w *spanWalker[D]) digits() int {
	start := w.i
	for w.i < len(w.doc) && isDigit(w.doc[w.i]) {
		w.i++
	}
	return w.i - start
}

// str reads the string at w.i (its opening quote). One that holds neither
// a backslash nor invalid UTF-8 is the document's own bytes; any other is
// decoded by capsule.WalkJSON itself (decoded).
func (w *spanWalker[D]) str() (D, error) {
	var none D
	start := w.i + 1
	for i := start; i < len(w.doc); {
		if plainByte[w.doc[i]] {
			i++
			continue
		}
		switch c := w.doc[i]; {
		case c == '"':
			w.i = i + 1
			return w.doc[start:i], nil
		case c == '\\':
			return w.decoded(start)
		case c < 0x20:
			return none, errSpanWalk // raw control characters never pass
		default:
			r, size := decodeRune(w.doc[i:])
			if r == utf8.RuneError && size == 1 {
				return w.decoded(start) // becomes U+FFFD, as WalkJSON reads it
			}
			i += size
		}
	}
	return none, errSpanWalk
}

// decodeRune is utf8.DecodeRune for either form of a document.
func decodeRune[D text](d D) (rune, int) {
	var b [utf8.UTFMax]byte
	return utf8.DecodeRune(b[:copy(b[:], d)])
}

// plainByte marks the bytes a string holds as they are: ASCII from the
// space on, but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// decoded reads the string whose contents start at start through
// capsule.WalkJSON, so escapes and invalid UTF-8 decode exactly as there.
// Its end is the first quote no backslash escapes: where WalkJSON's scanner
// ends a string it reads without error (an escape's other bytes are never a
// quote or a backslash), and in a string it refuses, the part up to that
// quote holds the same refusal.
func (w *spanWalker[D]) decoded(start int) (D, error) {
	var none D
	end := start
	for ; end < len(w.doc) && w.doc[end] != '"'; end++ {
		switch c := w.doc[end]; {
		case c == '\\':
			end++
		case c < 0x20:
			return none, errSpanWalk
		}
	}
	if end >= len(w.doc) {
		return none, errSpanWalk
	}
	var s string
	err := capsule.WalkJSON([]byte(w.doc[start-1:end+1]), func(tok capsule.JSONToken, v string) {
		if tok == capsule.TokenString {
			s = v
		}
	})
	if err != nil {
		return none, errSpanWalk
	}
	w.i = end + 1
	return D(s), nil
}
