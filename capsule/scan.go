package capsule

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a strict JSON parser for RFC 8785 input: the same values and
// refusals as walking encoding/json's tokens (parseTokens in the tests, which
// hold the two to each other), without the per-token interface values and
// allocations that made the walk the slowest part of RECEPTION.
type scanner struct {
	b []byte
	i int
	// spans, when non-nil, collects where the members of the top-level
	// object and of its object members lie ([ParseDocument]); top is the
	// index of the top-level member being read.
	spans []span
	top   int
	// texts, once given room (document does), holds the bytes of the
	// strings and numbers the parse makes, one after another: one
	// allocation for all of them rather than one each (a capsule has
	// about 20). The strings are its own, never the text's bytes, which
	// the caller may change; a string kept from the value keeps the room
	// of all of them alive, at most maxSharedText bytes.
	texts strings.Builder
	// stack holds the elements of the arrays being read, the innermost's
	// last; a finished array's are moved to room taken from elems, so
	// that an array is not grown element by element (see array).
	stack []any
	elems []any
}

// span is where a member's value lies in the document: b[start:end], no
// surrounding space, as encoding/json hands it to an Unmarshaler; key is
// where its name's opening quote is. parent is the index of the top-level
// member whose object holds it, -1 for a top-level member. Offsets, not
// names: the list holds no pointer, so the GC never scans it.
type span struct {
	parent, key, start, end int32
}

// open notes the member of an object at depth whose name starts at key and
// whose value starts at s.i (past any space), and returns its index, or -1
// when not noted.
func (s *scanner) open(depth, key int) int {
	if s.spans == nil || depth > 1 {
		return -1
	}
	parent := int32(-1)
	if depth == 1 {
		parent = int32(s.top)
	} else {
		s.top = len(s.spans)
	}
	s.spans = append(s.spans, span{parent: parent, key: int32(key), start: int32(s.i)})
	return len(s.spans) - 1
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format+" at offset %d", append([]any{ErrInvalidJSON}, append(args, s.i)...)...)
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(depth int) (any, error) {
	s.skipSpace()
	if s.i >= len(s.b) {
		return nil, s.errorf("unexpected end of JSON input")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		if depth >= MaxDepth {
			return nil, fmt.Errorf("%w: nested deeper than %d levels", ErrInvalidJSON, MaxDepth)
		}
		return s.object(depth)
	case c == '[':
		if depth >= MaxDepth {
			return nil, fmt.Errorf("%w: nested deeper than %d levels", ErrInvalidJSON, MaxDepth)
		}
		return s.array(depth)
	case c == '"':
		return s.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return true, s.literal("true")
	case c == 'f':
		return false, s.literal("false")
	case c == 'n':
		return nil, s.literal("null")
	}
	return nil, s.errorf("invalid character %q looking for beginning of value", s.b[s.i])
}

func (s *scanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.errorf("invalid literal, want %s", word)
	}
	s.i += len(word)
	return nil
}

func (s *scanner) object(depth int) (any, error) {
	s.i++ // '{'
	obj := make(map[string]any, objectHint(depth))
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return obj, nil
	}
	for {
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return nil, s.errorf("object key is not a string")
		}
		if err := s.member(obj, depth); err != nil {
			return nil, err
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return nil, s.errorf("unexpected end of JSON input")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return obj, nil
		default:
			return nil, s.errorf("invalid character %q after object value", s.b[s.i])
		}
	}
}

// member reads one member of an object at depth (its name, the colon, its
// value) into obj.
func (s *scanner) member(obj map[string]any, depth int) error {
	keyAt := s.i
	key, err := s.name()
	if err != nil {
		return err
	}
	v, err := s.afterName(depth, keyAt)
	if err != nil {
		// A name seen before is the error, as when it was looked up
		// before the rest of the member was read.
		if _, dup := obj[key]; dup {
			return duplicateKey(key)
		}
		return err
	}
	// Inserted, then told from a new name by the count: one map
	// operation a member rather than a lookup and an insertion.
	n := len(obj)
	obj[key] = v
	if len(obj) == n {
		return duplicateKey(key)
	}
	return nil
}

// afterName reads the colon and the value of a member whose name started
// at keyAt.
func (s *scanner) afterName(depth, keyAt int) (any, error) {
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, s.errorf("missing ':' after object key")
	}
	s.i++
	s.skipSpace()
	at := s.open(depth, keyAt)
	v, err := s.value(depth + 1)
	if err == nil && at >= 0 {
		s.spans[at].end = int32(s.i)
	}
	return v, err
}

func duplicateKey(key string) error {
	return fmt.Errorf("%w: duplicate object key %q", ErrInvalidJSON, key)
}

func (s *scanner) array(depth int) (any, error) {
	s.i++ // '['
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return []any{}, nil
	}
	base := len(s.stack)
	for {
		v, err := s.value(depth + 1)
		if err != nil {
			return nil, err
		}
		s.stack = append(s.stack, v)
		s.skipSpace()
		if s.i >= len(s.b) {
			return nil, s.errorf("unexpected end of JSON input")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return s.popArray(base), nil
		default:
			return nil, s.errorf("invalid character %q after array element", s.b[s.i])
		}
	}
}

// popArray returns the elements stacked from base on as an array of its
// own length and capacity (an append to it makes a new one, never writes
// into a neighbour's room), and takes them off the stack.
func (s *scanner) popArray(base int) []any {
	n := len(s.stack) - base
	if len(s.elems) < n {
		// Room for this array and the next few: a capsule's arrays
		// (criteria, references, locks, paths) take one allocation.
		s.elems = make([]any, max(n, 16))
	}
	arr := s.elems[:n:n]
	s.elems = s.elems[n:]
	copy(arr, s.stack[base:])
	clear(s.stack[base:])
	s.stack = s.stack[:base]
	return arr
}

func (s *scanner) number() (any, error) {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	default:
		return nil, s.errorf("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.i >= len(s.b) || !isDigit(s.b[s.i]) {
			return nil, s.errorf("invalid number")
		}
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.i >= len(s.b) || !isDigit(s.b[s.i]) {
			return nil, s.errorf("invalid number")
		}
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	}
	return json.Number(s.text(s.b[start:s.i])), nil
}

// maxSharedText bounds the room a parse shares between its strings and
// numbers (scanner.texts): a capsule's are about a kilobyte, and a string
// kept from a large one pins at most this much, not the whole text.
const maxSharedText = 4 << 10

// text is b as a string of its own: in texts when it has room, else
// allocated alone.
func (s *scanner) text(b []byte) string {
	if len(b) == 0 || s.texts.Cap()-s.texts.Len() < len(b) {
		return string(b)
	}
	at := s.texts.Len()
	s.texts.Write(b)
	return s.texts.String()[at:]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// str reads a string at s.i (its opening quote), decoding escapes (and
// invalid UTF-8, as U+FFFD) as encoding/json does.
func (s *scanner) str() (string, error) { return s.strOrName(false) }

// name is str for a member name: a capsule's member names, written without
// escapes, are the one shared copy in memberNames rather than a new string
// each (about 35 a capsule, in every capsule RECEPTION reads).
func (s *scanner) name() (string, error) { return s.strOrName(true) }

func (s *scanner) strOrName(name bool) (string, error) {
	s.i++ // '"'
	start := s.i
	end, err := s.plainEnd()
	if err != nil || end < 0 {
		if err == nil {
			return s.strSlow(start)
		}
		return "", err
	}
	b := s.b[start:end]
	s.i = end + 1
	if name {
		if known, ok := memberNames.find(b); ok {
			return known, nil
		}
	}
	return s.text(b), nil
}

// plainEnd finds the closing quote of a string from s.i on and returns
// where it is, or -1, with s.i at the first escape or invalid UTF-8, for
// strSlow to go on from; a control character is the error. The bytes are
// looked at eight at a time (stringWordSpecial), which also tells where
// the first that needs a look is: most of a capsule's strings are plain
// ASCII, and most of its names shorter than a word.
func (s *scanner) plainEnd() (int, error) {
	for s.i < len(s.b) {
		if s.i+8 <= len(s.b) {
			special := stringWordSpecial(s.b[s.i : s.i+8])
			if special == 0 {
				s.i += 8
				continue
			}
			s.i += bits.TrailingZeros64(special) >> 3
		}
		// The byte at s.i needs a look (or is one of the text's last
		// seven, looked at one by one).
		switch c := s.b[s.i]; {
		case c == '"':
			return s.i, nil
		case c == '\\':
			return -1, nil
		case c < 0x20:
			return -1, s.errorf("invalid character %q in string literal", c)
		case c < utf8.RuneSelf:
			s.i++
			continue
		}
		r, size := utf8.DecodeRune(s.b[s.i:])
		if r == utf8.RuneError && size == 1 {
			return -1, nil // invalid UTF-8: the slow path replaces it
		}
		s.i += size
	}
	return -1, nil
}

// stringWordSpecial returns, of the eight bytes of w, the top bit of each
// that needs a look in a string (past ASCII, a control, '"' or '\\') and
// maybe of some after the first such: 0 when none does. As in skipPlain,
// x-n*lsb sets a byte's top bit where the byte is below n or a byte before
// it was (a borrow only runs upwards), and x^c*lsb has a zero byte exactly
// where x holds c: so the lowest bit set is the first byte that needs a
// look, exactly.
func stringWordSpecial(w []byte) uint64 {
	_ = w[7]
	x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
	return (x | (x - 0x20*lsb) | ((x ^ '"'*lsb) - lsb) | ((x ^ '\\'*lsb) - lsb)) & msb
}

// strSlow goes on with a string from s.i, its first escape or invalid
// UTF-8, the string having started at start.
func (s *scanner) strSlow(start int) (string, error) {
	buf := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.text(buf), nil
		case c < 0x20:
			return "", s.errorf("invalid character %q in string literal", c)
		case c >= utf8.RuneSelf:
			// Invalid UTF-8 becomes U+FFFD, as encoding/json decodes it
			// (parse refuses invalid UTF-8 before it gets here).
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				buf = utf8.AppendRune(buf, utf8.RuneError)
			} else {
				buf = append(buf, s.b[s.i:s.i+size]...)
			}
			s.i += size
		case c != '\\':
			buf = append(buf, c)
			s.i++
		default:
			s.i++ // '\\'
			if s.i >= len(s.b) {
				return "", s.errorf("unexpected end of JSON input")
			}
			var err error
			if buf, err = s.escape(buf); err != nil {
				return "", err
			}
		}
	}
	return "", s.errorf("unexpected end of JSON input")
}

// shortEscapes are the one-character escapes and what they stand for.
var shortEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape appends what the escape at s.i (past its backslash) stands for.
func (s *scanner) escape(buf []byte) ([]byte, error) {
	e := s.b[s.i]
	if d := shortEscapes[e]; d != 0 {
		s.i++
		return append(buf, d), nil
	}
	if e != 'u' {
		return nil, s.errorf("invalid escape character %q in string literal", e)
	}
	r, ok := s.hex4(s.i + 1)
	if !ok {
		return nil, s.errorf("invalid escape in string literal")
	}
	s.i += 5
	if utf16.IsSurrogate(r) {
		r2, ok2 := rune(-1), false
		if s.i+6 <= len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
			r2, ok2 = s.hex4(s.i + 2)
		}
		if dec := utf16.DecodeRune(r, r2); ok2 && dec != utf8.RuneError {
			s.i += 6
			r = dec
		} else {
			r = utf8.RuneError // as encoding/json; parse refuses it afterwards
		}
	}
	return utf8.AppendRune(buf, r), nil
}

func (s *scanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// JSONToken is the kind of a token [WalkJSON] reports.
type JSONToken int

// Token kinds, in the order a document's structure produces them.
const (
	TokenObjectStart JSONToken = iota
	TokenObjectEnd
	TokenArrayStart
	TokenArrayEnd
	TokenKey    // a member name; s is the name
	TokenString // a string value; s is the string
	TokenScalar // a number, true, false or null
)

// WalkJSON calls fn for every token of raw, in document order, with member
// names and string values decoded. raw holds JSON values one after another
// (a stream, as encoding/json's Decoder reads it; usually one document).
// Unlike [ParseJSON] it builds nothing and accepts duplicate member names; it
// returns the first syntax error (wrapping [ErrInvalidJSON]), after reporting
// the tokens before it.
func WalkJSON(raw []byte, fn func(tok JSONToken, s string)) error {
	s := scanner{b: raw}
	for s.skipSpace(); s.i < len(s.b); s.skipSpace() {
		if err := s.walk(0, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *scanner) walk(depth int, fn func(JSONToken, string)) error {
	s.skipSpace()
	if s.i >= len(s.b) {
		return s.errorf("unexpected end of JSON input")
	}
	switch c := s.b[s.i]; {
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			return fmt.Errorf("%w: nested deeper than %d levels", ErrInvalidJSON, MaxDepth)
		}
		object := c == '{'
		end, startTok, endTok := byte(']'), TokenArrayStart, TokenArrayEnd
		if object {
			end, startTok, endTok = '}', TokenObjectStart, TokenObjectEnd
		}
		s.i++
		fn(startTok, "")
		s.skipSpace()
		if s.i < len(s.b) && s.b[s.i] == end {
			s.i++
			fn(endTok, "")
			return nil
		}
		for {
			if object {
				s.skipSpace()
				if s.i >= len(s.b) || s.b[s.i] != '"' {
					return s.errorf("object key is not a string")
				}
				key, err := s.name()
				if err != nil {
					return err
				}
				fn(TokenKey, key)
				s.skipSpace()
				if s.i >= len(s.b) || s.b[s.i] != ':' {
					return s.errorf("missing ':' after object key")
				}
				s.i++
			}
			if err := s.walk(depth+1, fn); err != nil {
				return err
			}
			s.skipSpace()
			if s.i >= len(s.b) {
				return s.errorf("unexpected end of JSON input")
			}
			switch s.b[s.i] {
			case ',':
				s.i++
			case end:
				s.i++
				fn(endTok, "")
				return nil
			default:
				return s.errorf("invalid character %q after element", s.b[s.i])
			}
		}
	case c == '"':
		v, err := s.str()
		if err != nil {
			return err
		}
		fn(TokenString, v)
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		if _, err := s.number(); err != nil {
			return err
		}
	case c == 't':
		if err := s.literal("true"); err != nil {
			return err
		}
	case c == 'f':
		if err := s.literal("false"); err != nil {
			return err
		}
	case c == 'n':
		if err := s.literal("null"); err != nil {
			return err
		}
	default:
		return s.errorf("invalid character %q looking for beginning of value", c)
	}
	fn(TokenScalar, "")
	return nil
}

// memberNames holds the member names of a capsule, at every depth (the json
// names of [Capsule]'s fields and of the structs under it), each as one
// string the scanner hands out for every capsule.
var memberNames = newNameTable(capsuleNames())

func capsuleNames() []string {
	var names []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Capsule]().PkgPath() {
			return
		}
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" && !slices.Contains(names, name) {
				names = append(names, name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[Capsule]())
	return names
}

// nameTable finds a name in a fixed set by a hash of its length and three
// of its bytes, with a multiplier chosen so that no two names of the set
// share a slot: one multiplication and one comparison, where a map hashes
// the whole name and probes (the parse looks up every member name of every
// capsule). With no such multiplier it holds nothing and finds nothing.
type nameTable struct {
	slots [256]string
	mul   uint32
}

func newNameTable(names []string) *nameTable {
	t := &nameTable{}
	for seed := uint32(1); seed < 1<<16; seed++ {
		t.mul = seed*0x9E3779B1 | 1
		if t.fill(names) {
			return t
		}
	}
	return &nameTable{}
}

// fill places every name in its slot, or reports a collision.
func (t *nameTable) fill(names []string) bool {
	t.slots = [256]string{}
	for _, n := range names {
		h := t.slot([]byte(n))
		if t.slots[h] != "" {
			return false
		}
		t.slots[h] = n
	}
	return true
}

func (t *nameTable) slot(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	h := uint32(len(b)) | uint32(b[0])<<8 | uint32(b[len(b)/2])<<16 | uint32(b[len(b)-1])<<24
	return (h * t.mul) >> 24
}

// find returns the set's copy of the name b, if b is one.
func (t *nameTable) find(b []byte) (string, bool) {
	n := t.slots[t.slot(b)]
	return n, n != "" && n == string(b)
}

// objectHint is the room a new object's map is made with. A capsule's
// top-level object has 13 required members and usually a few more; made
// empty, its map is grown twice on the way (a first group of 8, then a
// table); made for 14 it starts as that table.
func objectHint(depth int) int {
	if depth == 0 {
		return 14
	}
	return 0
}
