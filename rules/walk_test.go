package rules

import "github.com/sagad/sagad/capsule"

type visit struct {
	field, s, member string
	isKey            bool
}

func visits(walk func([]byte, func(func() string, string, bool, string)) error, raw []byte) ([]visit, error) {
	var out []visit
	err := walk(raw, func(field func() string, s string, isKey bool, member string) {
		out = append(out, visit{field(), s, member, isKey})
	})
	return out, err
}

// walkStrings is Rule 9's walk (walkJSONSpans over the bytes, fieldWalk
// following it) as the visits walkStringsPair compares: every member name
// (isKey) and string value, with its field path and, for values, the name
// of the member holding it ("" inside arrays).
func walkStrings(raw []byte, visit func(field func() string, s string, isKey bool, member string)) error {
	var at fieldWalk
	return walkJSONSpans(raw, func(tok capsule.JSONToken, s []byte) {
		if str, member := at.step(tok, s); str {
			visit(at.field, string(s), tok == capsule.TokenKey, string(member))
		}
	})
}
