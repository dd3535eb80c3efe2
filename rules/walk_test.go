package rules

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
