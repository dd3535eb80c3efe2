package adminsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode"
)

// maxDepth bounds the nesting of a request (a replay's corrected capsule
// is the deepest member any verb takes).
const maxDepth = 64

// checkMembers walks data as JSON and refuses an object that names a
// member twice, at any depth. encoding/json keeps the last of duplicate
// members while other readers (a schema validator, a log reader, a
// proxy) may keep the first, so a request that means two things to two
// readers is refused outright.
func checkMembers(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		seen      map[string]bool // nil in an array
		wantName  bool
		container json.Delim
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return badRequest("request: %v", err)
		}
		if n := len(stack); n > 0 && stack[n-1].container == '{' {
			top := &stack[n-1]
			if top.wantName {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:n-1]
					continue
				}
				name, _ := tok.(string)
				if top.seen[name] {
					return badRequest("request: member %q appears twice", name)
				}
				top.seen[name] = true
				top.wantName = false
				continue
			}
			top.wantName = true // this token is the member's value (or opens it)
		}
		d, ok := tok.(json.Delim)
		if !ok {
			continue
		}
		switch d {
		case '{', '[':
			if len(stack) == maxDepth {
				return badRequest("request: nested deeper than %d", maxDepth)
			}
			f := frame{container: d}
			if d == '{' {
				f.seen, f.wantName = map[string]bool{}, true
			}
			stack = append(stack, f)
		case ']':
			stack = stack[:len(stack)-1]
		}
	}
}

// cleanBy strips from by the Unicode format characters (category Cf:
// bidirectional overrides such as U+202E, zero-width spaces and joiners,
// soft hyphens), which a terminal or a log reader does not show as
// written, so the operator recorded is the one a person reads. Control
// characters are not stripped but refused ([checkBy]): a by with an
// escape sequence is no operator name to guess at.
func cleanBy(by string) string {
	if strings.IndexFunc(by, isFormat) < 0 {
		return by
	}
	return strings.Map(func(r rune) rune {
		if isFormat(r) {
			return -1
		}
		return r
	}, by)
}

func isFormat(r rune) bool { return unicode.Is(unicode.Cf, r) }
