package schemas

import (
	"regexp/syntax"
	"unicode/utf8"
)

// classPattern matches what an anchored pattern made of character classes,
// each repeated, matches: "^[0-9]+\.[0-9]+$", "^[0-9a-f]{64}$", or an
// alternation of such ("^(?:uuid|ulid)$"). The capsule schema's patterns
// are all of this shape, and regexp's general machine was a tenth of
// RECEPTION's work on a valid capsule; a class sequence needs none.
// compileClassPattern takes only shapes where matching greedily, piece by
// piece, is exact (each piece of varying length is followed by the end or
// by a piece that must start with a rune it cannot hold); anything else is
// left to regexp. TestClassPatternAgrees holds it to regexp.
type classPattern struct {
	branches [][]classPiece
}

// classPiece is a class repeated min to max times (max -1: no bound).
type classPiece struct {
	ranges   []rune // lo, hi pairs, as regexp/syntax holds a class
	min, max int
	// ascii holds the class's ASCII members, bit c for c: a pattern's
	// strings are nearly all ASCII, and a bit test is what a range search
	// of each rune cost (ids, digests and names, on every capsule).
	ascii [2]uint64
}

// withASCII sets p.ascii from p.ranges.
func (p classPiece) withASCII() classPiece {
	for c := rune(0); c < utf8.RuneSelf; c++ {
		if inClass(p.ranges, c) {
			p.ascii[c>>6] |= 1 << (c & 63)
		}
	}
	return p
}

// compileClassPattern returns the matcher of expr, or nil when expr is not of
// the shape classPattern matches exactly.
func compileClassPattern(expr string) *classPattern {
	re, err := syntax.Parse(expr, syntax.Perl) // as regexp.Compile parses it
	if err != nil || re.Op != syntax.OpConcat || len(re.Sub) < 2 {
		return nil
	}
	first, last := re.Sub[0], re.Sub[len(re.Sub)-1]
	if first.Op != syntax.OpBeginText || last.Op != syntax.OpEndText {
		return nil
	}
	body := re.Sub[1 : len(re.Sub)-1]
	alts := [][]*syntax.Regexp{body}
	if len(body) == 1 && body[0].Op == syntax.OpAlternate {
		alts = nil
		for _, b := range body[0].Sub {
			alts = append(alts, concatOf(b))
		}
	}
	p := &classPattern{}
	for _, alt := range alts {
		pieces, ok := classPieces(alt)
		if !ok {
			return nil
		}
		for i := range pieces {
			pieces[i] = pieces[i].withASCII()
		}
		p.branches = append(p.branches, pieces)
	}
	return p
}

func concatOf(re *syntax.Regexp) []*syntax.Regexp {
	if re.Op == syntax.OpConcat {
		return re.Sub
	}
	return []*syntax.Regexp{re}
}

// classPieces turns a concatenation into pieces, or reports false.
func classPieces(subs []*syntax.Regexp) ([]classPiece, bool) {
	var out []classPiece
	for _, re := range subs {
		if re.Op == syntax.OpLiteral && re.Flags&syntax.FoldCase == 0 {
			for _, r := range re.Rune {
				out = append(out, classPiece{ranges: []rune{r, r}, min: 1, max: 1})
			}
			continue
		}
		piece, ok := repeatedClass(re)
		if !ok {
			return nil, false
		}
		out = append(out, piece)
	}
	return out, greedyIsExact(out)
}

// repeatedClass reads a class, or a class or single rune under a repeat.
func repeatedClass(re *syntax.Regexp) (classPiece, bool) {
	min, max := 1, 1
	switch re.Op {
	case syntax.OpRepeat:
		min, max = re.Min, re.Max
	case syntax.OpPlus:
		min, max = 1, -1
	case syntax.OpStar:
		min, max = 0, -1
	case syntax.OpQuest:
		min, max = 0, 1
	case syntax.OpCharClass:
		return classPiece{ranges: re.Rune, min: 1, max: 1}, true
	default:
		return classPiece{}, false
	}
	if re.Flags&syntax.NonGreedy != 0 || len(re.Sub) != 1 {
		return classPiece{}, false
	}
	sub := re.Sub[0]
	switch {
	case sub.Op == syntax.OpCharClass:
		return classPiece{ranges: sub.Rune, min: min, max: max}, true
	case sub.Op == syntax.OpLiteral && len(sub.Rune) == 1 && sub.Flags&syntax.FoldCase == 0:
		return classPiece{ranges: []rune{sub.Rune[0], sub.Rune[0]}, min: min, max: max}, true
	}
	return classPiece{}, false
}

// greedyIsExact reports whether every piece of varying length is last or
// followed by a piece that takes at least one rune, none of which it holds:
// then where a greedy piece stops is the only place a match can go on.
func greedyIsExact(pieces []classPiece) bool {
	for i, p := range pieces {
		if p.min == p.max || i == len(pieces)-1 {
			continue
		}
		next := pieces[i+1]
		if next.min < 1 || overlap(p.ranges, next.ranges) {
			return false
		}
	}
	return true
}

func overlap(a, b []rune) bool {
	for i := 0; i+1 < len(a); i += 2 {
		for j := 0; j+1 < len(b); j += 2 {
			if a[i] <= b[j+1] && b[j] <= a[i+1] {
				return true
			}
		}
	}
	return false
}

// match reports whether regexp would match s.
func (p *classPattern) match(s string) bool {
	for _, b := range p.branches {
		if matchPieces(b, s) {
			return true
		}
	}
	return false
}

// matchPieces matches the whole of s, each piece taking as many runes as
// it can (decoded as regexp decodes them: invalid UTF-8 is U+FFFD, a byte).
func matchPieces(pieces []classPiece, s string) bool {
	i := 0
	for _, p := range pieces {
		n := 0
		for i < len(s) && (p.max < 0 || n < p.max) {
			if c := s[i]; c < utf8.RuneSelf {
				if p.ascii[c>>6]&(1<<(c&63)) == 0 {
					break
				}
				i++
				n++
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			if !inClass(p.ranges, r) {
				break
			}
			i += size
			n++
		}
		if n < p.min {
			return false
		}
	}
	return i == len(s)
}

func inClass(ranges []rune, r rune) bool {
	for i := 0; i+1 < len(ranges); i += 2 {
		if r >= ranges[i] && r <= ranges[i+1] {
			return true
		}
	}
	return false
}
