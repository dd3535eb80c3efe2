package schemas

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// The fast path. RECEPTION validates every capsule, and the library
// allocates at each schema node it visits (a scope, closures, a map of the
// object's member names) whether the document is valid or not: about a
// quarter of sagad's own allocation. Most capsules are valid, and a valid
// document needs no error tree, so a small checker compiled from the same
// schema source answers "valid" without allocating; anything else goes to
// the library, which alone writes findings.
//
// The safety property is one-sided: fast says valid ⇒ the library says
// valid. Every keyword below is checked the way jsonschema/v5 checks it (the
// same regular expressions — matched without regexp's machine when they are
// anchored class sequences, see classPattern —, the same format functions,
// code points for lengths); where exactness would cost code (numbers written with a fraction
// or an exponent, integers of more than 18 digits) the checker says "not valid" and the
// library decides. A schema using any keyword the compiler does not know gets
// no fast path at all. FuzzFastAgrees holds the property, and
// TestFastCoversCapsule fails when capsule.schema.json outgrows the compiler.

// fastNode is one compiled schema object.
type fastNode struct {
	types    typeSet // 0: any type
	props    map[string]*fastNode
	closed   bool // additionalProperties: false
	required []string
	members  []fastMember // props and required, for validObject
	items    *fastNode
	minItems int // -1: none
	maxItems int // -1: none
	minLen   int // -1: none
	maxLen   int // -1: none
	pattern  *regexp.Regexp
	classes  *classPattern // pattern's matcher when of that shape, else nil
	format   func(any) bool
	enum     []any // strings, booleans, nil
	hasConst bool
	constant any // a string, a boolean or nil
	oneOf    []*fastNode
	minimum  *int64
}

// typeSet is a set of JSON types, one bit each.
type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBoolean
	tObject
	tArray
	tNumber
	tInteger
	tString
)

var typeNames = map[string]typeSet{
	"null": tNull, "boolean": tBoolean, "object": tObject, "array": tArray,
	"number": tNumber, "integer": tInteger, "string": tString,
}

// annotations are keywords that assert nothing.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$defs": true, "$comment": true,
	"title": true, "description": true, "examples": true, "default": true,
}

// fastCompiler compiles one schema document; refs are local ("#/$defs/x").
type fastCompiler struct {
	root any
	refs map[string]*fastNode
}

// compileFast compiles a decoded schema source into a fast checker, or
// returns an error naming the first keyword or form it does not handle.
func compileFast(root any) (*fastNode, error) {
	c := &fastCompiler{root: root, refs: map[string]*fastNode{}}
	return c.node(root, "")
}

func (c *fastCompiler) node(v any, at string) (*fastNode, error) {
	s, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: a boolean schema", at)
	}
	if ref, ok := s["$ref"].(string); ok {
		for k := range s {
			if k != "$ref" && !annotations[k] {
				return nil, fmt.Errorf("%s: $ref beside %s", at, k)
			}
		}
		return c.ref(ref, at)
	}
	n := &fastNode{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
	for k, kv := range s {
		if err := c.keyword(n, k, kv, at+"/"+k); err != nil {
			return nil, err
		}
	}
	n.members = memberList(n.props, n.required)
	return n, nil
}

// fastMember is a member an object node names: in properties (node set),
// in required, or both.
type fastMember struct {
	name     string
	node     *fastNode // nil: named by required alone
	required bool
}

// memberList lists the members props and required name, each once, sorted
// by name.
func memberList(props map[string]*fastNode, required []string) []fastMember {
	var out []fastMember
	for name, p := range props {
		out = append(out, fastMember{name: name, node: p, required: slices.Contains(required, name)})
	}
	for _, name := range required {
		if _, ok := props[name]; !ok && !slices.ContainsFunc(out, func(m fastMember) bool { return m.name == name }) {
			out = append(out, fastMember{name: name, required: true})
		}
	}
	slices.SortFunc(out, func(a, b fastMember) int { return strings.Compare(a.name, b.name) })
	return out
}

// ref compiles a local reference once, so a shared definition is one node.
func (c *fastCompiler) ref(ref, at string) (*fastNode, error) {
	if n, ok := c.refs[ref]; ok {
		if n == nil {
			return nil, fmt.Errorf("%s: $ref %q is recursive", at, ref)
		}
		return n, nil
	}
	c.refs[ref] = nil // in progress: a definition that reaches itself is refused, not followed forever
	frag, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok || strings.ContainsAny(frag, "/~%") {
		return nil, fmt.Errorf("%s: $ref %q is not a local definition", at, ref)
	}
	defs, _ := c.root.(map[string]any)["$defs"].(map[string]any)
	def, ok := defs[frag]
	if !ok {
		return nil, fmt.Errorf("%s: $ref %q not found", at, ref)
	}
	n, err := c.node(def, "/$defs/"+frag)
	if err != nil {
		return nil, err
	}
	c.refs[ref] = n
	return n, nil
}

// keyword compiles one keyword into n.
func (c *fastCompiler) keyword(n *fastNode, k string, v any, at string) error {
	var err error
	switch k {
	case "type":
		err = n.setTypes(v)
	case "properties":
		err = c.properties(n, v, at)
	case "additionalProperties":
		switch v {
		case false:
			n.closed = true
		case true:
		default:
			err = fmt.Errorf("%s: only true or false", at)
		}
	case "required":
		n.required, err = stringList(v)
	case "items":
		n.items, err = c.node(v, at)
	case "minItems":
		n.minItems, err = count(v)
	case "maxItems":
		n.maxItems, err = count(v)
	case "minLength":
		n.minLen, err = count(v)
	case "maxLength":
		n.maxLen, err = count(v)
	case "pattern":
		p, _ := v.(string)
		// As the library compiles it, so a match is the library's match.
		n.pattern, err = regexp.Compile(p)
		n.classes = compileClassPattern(p)
	case "format":
		name, _ := v.(string)
		if n.format = jsonschema.Formats[name]; n.format == nil {
			err = fmt.Errorf("%s: format %q", at, v)
		} else if name == "date-time" {
			n.format = fastDateTime(n.format)
		}
	case "enum":
		n.enum, _ = v.([]any)
		err = exactValues(n.enum, at)
	case "const":
		n.hasConst, n.constant = true, v
		err = exactValues([]any{v}, at)
	case "oneOf":
		n.oneOf, err = c.oneOf(v, at)
	case "minimum":
		var m int64
		m, err = integer(v)
		n.minimum = &m
	default:
		if !annotations[k] {
			err = fmt.Errorf("%s: keyword not handled", at)
		}
	}
	if err != nil && !strings.HasPrefix(err.Error(), at) {
		err = fmt.Errorf("%s: %w", at, err)
	}
	return err
}

func (n *fastNode) setTypes(v any) error {
	names, ok := v.([]any)
	if !ok {
		names = []any{v}
	}
	for _, t := range names {
		name, _ := t.(string)
		bit, ok := typeNames[name]
		if !ok {
			return fmt.Errorf("type %v", t)
		}
		n.types |= bit
	}
	return nil
}

func (c *fastCompiler) properties(n *fastNode, v any, at string) error {
	props, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("not an object")
	}
	n.props = make(map[string]*fastNode, len(props))
	for name, ps := range props {
		p, err := c.node(ps, at+"/"+name)
		if err != nil {
			return err
		}
		n.props[name] = p
	}
	return nil
}

// oneOf takes only branches whose fast verdict is the library's in both
// directions: "exactly one" needs every branch's "no" to be exact too.
func (c *fastCompiler) oneOf(v any, at string) ([]*fastNode, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("not a list")
	}
	out := make([]*fastNode, 0, len(list))
	for i, b := range list {
		n, err := c.node(b, at+"/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		if !n.exact() {
			return nil, fmt.Errorf("%s/%d: a branch whose rejection may not be the library's", at, i)
		}
		out = append(out, n)
	}
	return out, nil
}

// exact reports whether n rejects exactly what the library rejects: no
// number keywords (the fast checker turns some numbers away) and no nested
// schemas.
func (n *fastNode) exact() bool {
	return n.types&(tNumber|tInteger) == 0 && n.props == nil && !n.closed && n.required == nil &&
		n.items == nil && n.oneOf == nil && n.minimum == nil && n.minItems < 0 && n.maxItems < 0
}

// stringList reads a list of strings.
func stringList(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not a list")
	}
	out := make([]string, 0, len(list))
	for _, s := range list {
		str, ok := s.(string)
		if !ok {
			return nil, fmt.Errorf("%v is not a string", s)
		}
		out = append(out, str)
	}
	return out, nil
}

// count reads a non-negative integer keyword value.
func count(v any) (int, error) {
	i, err := integer(v)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("%v is not a count", v)
	}
	return int(i), nil
}

// integer reads an integer written without a fraction or an exponent.
func integer(v any) (int64, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%v is not a number", v)
	}
	i, ok := plainInt(num)
	if !ok {
		return 0, fmt.Errorf("%v is not a plain integer", v)
	}
	return i, nil
}

// exactValues accepts enum and const values compared by Go equality the way
// the library compares them: strings, booleans and null.
func exactValues(vs []any, at string) error {
	if len(vs) == 0 {
		return fmt.Errorf("%s: empty", at)
	}
	for _, v := range vs {
		switch v.(type) {
		case string, bool, nil:
		default:
			return fmt.Errorf("%s: value %v", at, v)
		}
	}
	return nil
}

// plainInt parses -?[0-9]+ that fits an int64; anything else (1.0, 1e2,
// huge numbers) is left to the library.
func plainInt(n json.Number) (int64, bool) {
	s := string(n)
	digits := strings.TrimPrefix(s, "-")
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	i, err := strconv.ParseInt(s, 10, 64)
	return i, err == nil
}

// valid reports whether v is certainly valid against n. false means "ask the
// library": it may still be valid.
func (n *fastNode) valid(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		return n.is(tObject) && n.validObject(x) && n.validCommon(v)
	case []any:
		return n.is(tArray) && n.validArray(x) && n.validCommon(v)
	case string:
		return n.is(tString) && n.validString(x) && n.validCommon(v)
	case json.Number:
		return n.validNumber(x) && n.validCommon(v)
	case bool:
		return n.is(tBoolean) && n.validCommon(v)
	case nil:
		return n.is(tNull) && n.validCommon(v)
	default:
		return false // the library refuses Go types that are not JSON's
	}
}

func (n *fastNode) is(t typeSet) bool { return n.types == 0 || n.types&t != 0 }

// validCommon checks the keywords that apply to every type.
func (n *fastNode) validCommon(v any) bool {
	if n.hasConst && v != n.constant {
		return false
	}
	if n.enum != nil {
		found := false
		for _, e := range n.enum {
			if e == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if n.format != nil && !n.format(v) {
		return false
	}
	if n.oneOf != nil {
		matched := 0
		for _, b := range n.oneOf {
			if b.valid(v) {
				matched++
			}
		}
		if matched != 1 {
			return false
		}
	}
	return true
}

// validObject looks each member the schema names up once, rather than
// iterating obj, looking each of its members up in props and then each
// required one up in obj again (a capsule's top level: 19 lookups, not 41
// and an iteration). A member outside props is seen in the count: obj has
// one exactly when fewer of its members were found in props than it has.
func (n *fastNode) validObject(obj map[string]any) bool {
	inProps := 0
	for i := range n.members {
		m := &n.members[i]
		v, ok := obj[m.name]
		switch {
		case !ok && m.required:
			return false
		case !ok || m.node == nil:
			continue
		}
		inProps++
		if !m.node.valid(v) {
			return false
		}
	}
	return !n.closed || inProps == len(obj)
}

func (n *fastNode) validArray(list []any) bool {
	if len(list) < n.minItems || (n.maxItems >= 0 && len(list) > n.maxItems) {
		return false
	}
	if n.items == nil {
		return true
	}
	for _, v := range list {
		if !n.items.valid(v) {
			return false
		}
	}
	return true
}

func (n *fastNode) validString(s string) bool {
	if (n.minLen >= 0 || n.maxLen >= 0) && !lenWithin(len(s), n.minLen, n.maxLen) {
		// Code points, as the library counts them (an invalid byte is one).
		l := utf8.RuneCountInString(s)
		if l < n.minLen || (n.maxLen >= 0 && l > n.maxLen) {
			return false
		}
	}
	if n.classes != nil {
		return n.classes.match(s)
	}
	return n.pattern == nil || n.pattern.MatchString(s)
}

// lenWithin reports whether a string of size bytes certainly has from
// minLen to maxLen code points (-1: no bound) without counting them: it
// has at most one per byte and at least one per utf8.UTFMax bytes.
func lenWithin(size, minLen, maxLen int) bool {
	return (maxLen < 0 || size <= maxLen) && (size+utf8.UTFMax-1)/utf8.UTFMax >= minLen
}

func (n *fastNode) validNumber(num json.Number) bool {
	if n.types != 0 && n.types&tNumber == 0 && n.types&tInteger == 0 {
		return false
	}
	needInt := n.types != 0 && n.types&tNumber == 0
	if !needInt && n.minimum == nil {
		return true
	}
	i, ok := plainInt(num)
	if !ok {
		return false
	}
	return n.minimum == nil || i >= *n.minimum
}

// fastCapsule is the capsule schema's fast checker, nil when the schema
// uses something compileFast does not handle (then every capsule takes the
// library's path, correct and slower).
var fastCapsule = sync.OnceValue(func() *fastNode {
	n, _ := compileCapsuleFast()
	return n
})

func compileCapsuleFast() (*fastNode, error) {
	src, err := decode(Source(Capsule))
	if err != nil {
		return nil, err
	}
	return compileFast(src)
}

// fastValid reports whether doc is certainly valid against the named schema.
// Only the capsule schema, validated once per capsule on sagad's hot path,
// has a fast checker.
func fastValid(name Name, doc any) bool {
	if name != Capsule {
		return false
	}
	n := fastCapsule()
	return n != nil && n.valid(doc)
}

// outOfRange returns the pointer of the first number in v that the library
// would read as a big.Rat (an integer's type check, a minimum) and cannot:
// math/big refuses decimal exponents past a million, and jsonschema/v5 then
// dereferences the nil it got, a panic that would take the process down
// (budget.tokens: 1e2000000 is a 26-byte capsule member); and it is slow
// long before (see maxReadExponent), so a number past that is out of
// range too. Numbers the schema only types as numbers, or never looks at
// (metadata), are not read.
func (n *fastNode) outOfRange(v any, at string) (string, bool) {
	switch x := v.(type) {
	case json.Number:
		if (n.types&tInteger != 0 || n.minimum != nil) && !withinExponent(string(x), maxReadExponent) {
			return at, true
		}
	case map[string]any:
		for k, e := range x {
			if p, ok := n.props[k]; ok {
				if ptr, bad := p.outOfRange(e, at+"/"+escape(k)); bad {
					return ptr, true
				}
			}
		}
	case []any:
		if n.items != nil {
			for i, e := range x {
				if ptr, bad := n.items.outOfRange(e, at+"/"+strconv.Itoa(i)); bad {
					return ptr, true
				}
			}
		}
	}
	return "", false
}

// ratParses reports whether big.Rat.SetString accepts the JSON number s,
// without doing its arithmetic: it refuses an exponent that does not fit an
// int64, and a non-zero value whose decimal exponent, net of the fraction's
// digits, is past ±1e6.
func ratParses(s string) bool { return withinExponent(s, 1e6) }

// maxReadExponent bounds the decimal exponent, net of the fraction's
// digits, of a number the capsule schema constrains (an integer's type, a
// minimum) that is read at all. math/big would hold more, at a cost that
// grows with the exponent (1e999999 is 17 ms to read, and a capsule has 21
// such members: 0.75 s of a core for 3 KB); no Go integer or float64 sagad
// decodes a member into holds anything past 1e308, so such a capsule could
// not run anyway.
const maxReadExponent = 400

// withinExponent reports whether the JSON number s is zero, or has a
// decimal exponent, net of its fraction's digits, within ±limit.
func withinExponent(s string, limit int64) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	var e int64
	if hasExp {
		var err error
		if e, err = strconv.ParseInt(strings.TrimPrefix(exp, "+"), 10, 64); err != nil {
			return false
		}
	}
	intPart, frac, _ := strings.Cut(strings.TrimPrefix(mant, "-"), ".")
	if strings.Trim(intPart+frac, "0") == "" {
		return true // zero, whatever its exponent
	}
	e -= int64(len(frac))
	return e >= -limit && e <= limit
}

// outOfRange is [fastNode.outOfRange] for the named schema; "/" is the root.
// The documents sent on saga.compose (a composition, a chain) have no fast
// tree saying where the library reads a number, so every number in them is
// held to maxReadExponent, wherever it is: a producer's 4 KB document of
// 1e999999s cost half a second of a core per request.
func outOfRange(name Name, doc any) (string, bool) {
	if name == Composition || name == Chain {
		var far []string
		beyond(doc, "", &far)
		if len(far) == 0 {
			return "", false
		}
		slices.Sort(far)
		return far[0], true
	}
	if name != Capsule || fastCapsule() == nil {
		return "", false
	}
	ptr, bad := fastCapsule().outOfRange(doc, "")
	if ptr == "" {
		ptr = "/"
	}
	return ptr, bad
}

// beyond appends the pointer of every number in v past maxReadExponent.
func beyond(v any, at string, out *[]string) {
	switch x := v.(type) {
	case json.Number:
		if !withinExponent(string(x), maxReadExponent) {
			*out = append(*out, cmp.Or(at, "/"))
		}
	case map[string]any:
		for k, e := range x {
			beyond(e, at+"/"+escape(k), out)
		}
	case []any:
		for i, e := range x {
			beyond(e, at+"/"+strconv.Itoa(i), out)
		}
	}
}
