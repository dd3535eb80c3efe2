package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// -o jsonpath=TEMPLATE prints parts of what -o json would print, as
// kubectl's does: text outside braces is printed as is; {PATH} prints the
// values PATH selects, separated by spaces (strings bare, anything else as
// compact JSON); {"\n"} is a quoted string; {range PATH}...{end} repeats
// what is between for each value PATH selects, PATH inside being relative
// to that value. A PATH is "." or a chain of .name, [N] (negative counts
// from the end) and [*] (every element or member). A key that is absent
// selects nothing, as with kubectl's default --allow-missing-template-keys.

// outputJSONPath is the prefix of --output's jsonpath format.
const outputJSONPath = "jsonpath="

// errJSONPath wraps every template that does not parse.
var errJSONPath = errors.New("jsonpath")

// jpNode is one piece of a template: text (text set), a path, or a range
// over a path with the nodes between it and its {end}.
type jpNode struct {
	text   *string
	path   []jpStep
	isPath bool
	body   []jpNode
}

// jpStep is one step of a path: a member name, an index, or every element.
type jpStep struct {
	name  string
	index int
	kind  byte // 'n' name, 'i' index, '*' all
}

// parseJSONPath parses a template.
func parseJSONPath(tmpl string) ([]jpNode, error) {
	nodes, rest, err := parseJPNodes(tmpl, false)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", errJSONPath, tmpl, err)
	}
	if rest != "" {
		return nil, fmt.Errorf("%w %q: {end} without {range}", errJSONPath, tmpl)
	}
	return nodes, nil
}

// parseJPNodes parses until the end of s or, inRange, an {end}; it returns
// what follows that {end}.
func parseJPNodes(s string, inRange bool) ([]jpNode, string, error) {
	var nodes []jpNode
	for s != "" {
		open := strings.IndexByte(s, '{')
		if open < 0 {
			text := s
			nodes = append(nodes, jpNode{text: &text})
			s = ""
			break
		}
		if open > 0 {
			text := s[:open]
			nodes = append(nodes, jpNode{text: &text})
		}
		closing := strings.IndexByte(s[open:], '}')
		if closing < 0 {
			return nil, "", errors.New("a { without its }")
		}
		expr := strings.TrimSpace(s[open+1 : open+closing])
		s = s[open+closing+1:]
		switch {
		case expr == "end":
			if !inRange {
				return nil, "", errors.New("{end} without {range}")
			}
			return nodes, s, nil
		case strings.HasPrefix(expr, "range "):
			path, err := parseJPPath(strings.TrimSpace(strings.TrimPrefix(expr, "range ")))
			if err != nil {
				return nil, "", err
			}
			body, rest, err := parseJPNodes(s, true)
			if err != nil {
				return nil, "", err
			}
			if body == nil {
				body = []jpNode{} // {range X}{end}: a range still, printing nothing
			}
			nodes = append(nodes, jpNode{path: path, isPath: true, body: body})
			s = rest
			continue
		case strings.HasPrefix(expr, `"`):
			text, err := strconv.Unquote(expr)
			if err != nil {
				return nil, "", fmt.Errorf("%s: not a quoted string", expr)
			}
			nodes = append(nodes, jpNode{text: &text})
		default:
			path, err := parseJPPath(expr)
			if err != nil {
				return nil, "", err
			}
			nodes = append(nodes, jpNode{path: path, isPath: true})
		}
	}
	if inRange {
		return nil, "", errors.New("{range} without {end}")
	}
	return nodes, "", nil
}

// parseJPPath parses a path: ".", or steps each .name, [N] or [*]; a
// leading $ (the root) is allowed.
func parseJPPath(p string) ([]jpStep, error) {
	p = strings.TrimPrefix(p, "$")
	if p == "." || p == "" {
		return nil, nil
	}
	var steps []jpStep
	for p != "" {
		switch p[0] {
		case '.':
			end := strings.IndexAny(p[1:], ".[")
			if end < 0 {
				end = len(p) - 1
			}
			name := p[1 : 1+end]
			p = p[1+end:]
			switch name {
			case "":
				return nil, errors.New("an empty name after '.'")
			case "*":
				steps = append(steps, jpStep{kind: '*'})
			default:
				steps = append(steps, jpStep{kind: 'n', name: name})
			}
		case '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return nil, errors.New("a [ without its ]")
			}
			in := strings.TrimSpace(p[1:end])
			p = p[end+1:]
			if in == "*" {
				steps = append(steps, jpStep{kind: '*'})
				continue
			}
			if len(in) > 1 && in[0] == '\'' && in[len(in)-1] == '\'' {
				steps = append(steps, jpStep{kind: 'n', name: in[1 : len(in)-1]})
				continue
			}
			if q, err := strconv.Unquote(in); err == nil && in[0] == '"' {
				steps = append(steps, jpStep{kind: 'n', name: q})
				continue
			}
			n, err := strconv.Atoi(in)
			if err != nil {
				return nil, fmt.Errorf("[%s]: want an index, * or a quoted name", in)
			}
			steps = append(steps, jpStep{kind: 'i', index: n})
		default:
			return nil, fmt.Errorf("%q: a path starts with '.' or '['", p)
		}
	}
	return steps, nil
}

// selectJP returns the values path selects in v.
func selectJP(v any, path []jpStep) []any {
	cur := []any{v}
	for _, st := range path {
		var next []any
		for _, c := range cur {
			switch x := c.(type) {
			case map[string]any:
				switch st.kind {
				case 'n':
					if m, ok := x[st.name]; ok {
						next = append(next, m)
					}
				case '*':
					for _, k := range sortedKeys(x) {
						next = append(next, x[k])
					}
				}
			case []any:
				switch st.kind {
				case 'i':
					i := st.index
					if i < 0 {
						i += len(x)
					}
					if i >= 0 && i < len(x) {
						next = append(next, x[i])
					}
				case '*':
					next = append(next, x...)
				}
			}
		}
		cur = next
	}
	return cur
}

// sortedKeys are m's keys in order, so [*] over an object is stable.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// execJP writes nodes evaluated against v.
func execJP(w *bytes.Buffer, nodes []jpNode, v any) {
	for _, n := range nodes {
		switch {
		case n.text != nil:
			w.WriteString(*n.text)
		case n.body != nil:
			for _, item := range selectJP(v, n.path) {
				execJP(w, n.body, item)
			}
		default:
			for i, item := range selectJP(v, n.path) {
				if i > 0 {
					w.WriteByte(' ')
				}
				writeJPValue(w, item)
			}
		}
	}
}

// writeJPValue writes a string bare (made printable: the values come from
// capsules and agents) and anything else as compact JSON.
func writeJPValue(w *bytes.Buffer, v any) {
	if s, ok := v.(string); ok {
		w.WriteString(printable(s))
		return
	}
	b, _ := json.Marshal(v) // a value decoded from JSON encodes again
	w.Write(b)
}

// jsonPathEncoder is the encodeFunc of -o jsonpath=TEMPLATE: v is encoded
// as -o json would encode it, read back and the template run over it.
func jsonPathEncoder(nodes []jpNode) encodeFunc {
	return func(w io.Writer, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var doc any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return err
		}
		var out bytes.Buffer
		execJP(&out, nodes, doc)
		_, err = w.Write(out.Bytes())
		return err
	}
}
