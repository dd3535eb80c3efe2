package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// walkStringsTokens is walkStrings as it was before capsule.WalkJSON: a walk
// over encoding/json's tokens, kept as the reference the new walk is held to.
func walkStringsTokens(raw []byte, visit func(field func() string, s string, isKey bool, member string)) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var stack []frame
	advance := func() {
		if n := len(stack); n > 0 {
			if top := &stack[n-1]; top.object {
				top.wantKey = true
			} else {
				top.index++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if len(stack) > 0 {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{object: true, wantKey: true})
			case '[':
				stack = append(stack, frame{})
			default: // '}' or ']'
				stack = stack[:len(stack)-1]
				advance()
			}
		case string:
			n := len(stack)
			if n > 0 && stack[n-1].object && stack[n-1].wantKey {
				stack[n-1].key, stack[n-1].wantKey = t, false
				visit(func() string { return renderField(stack) }, t, true, "")
				continue
			}
			member := ""
			if n > 0 && stack[n-1].object {
				member = stack[n-1].key
			}
			visit(func() string { return renderField(stack) }, t, false, member)
			advance()
		default:
			advance()
		}
	}
}
