package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONPath(t *testing.T) {
	t.Parallel()
	doc := []map[string]any{
		{"capsule_id": "a", "state": "completed", "cycles_used": 1, "tags": []string{"x", "y"}},
		{"capsule_id": "b", "state": "halted", "halt_reason": "timeout\x1b[2J", "cycles_used": 2},
	}
	tests := []struct {
		tmpl, want, wantErr string
	}{
		{tmpl: `{[*].capsule_id}`, want: "a b"},
		{tmpl: `{$[*].capsule_id}`, want: "a b"},
		{tmpl: `{[0].state}`, want: "completed"},
		{tmpl: `{[-1].capsule_id}`, want: "b"},
		{tmpl: `{[5].capsule_id}`, want: ""},
		{tmpl: `{[*].missing}`, want: ""},
		{tmpl: `{[0].tags}`, want: `["x","y"]`},
		{tmpl: `{[0].tags[1]}`, want: "y"},
		{tmpl: `{[0]['state']}`, want: "completed"},
		{tmpl: `{[*].cycles_used}`, want: "1 2"},
		{tmpl: `ids: {[*].capsule_id}!`, want: "ids: a b!"},
		{tmpl: `{range [*]}{.capsule_id}={.state}{"\n"}{end}`, want: "a=completed\nb=halted\n"},
		{tmpl: `{range [*]}{.tags[*]}{end}`, want: "x y"},
		{tmpl: `{range [*]}{end}`, want: ""},
		{tmpl: `{[1].halt_reason}`, want: `timeout\x1b[2J`},
		{tmpl: `{[0].*}`, want: `a 1 completed ["x","y"]`},
		{tmpl: `{[0]["state"]}`, want: "completed"},
		{tmpl: `{.}`, want: `[{"capsule_id":"a","cycles_used":1,"state":"completed","tags":["x","y"]},{"capsule_id":"b","cycles_used":2,"halt_reason":"timeout\u001b[2J","state":"halted"}]`},
		{tmpl: `{[*].state`, wantErr: "a { without its }"},
		{tmpl: `{range [*]}{.state}`, wantErr: "{range} without {end}"},
		{tmpl: `{end}`, wantErr: "{end} without {range}"},
		{tmpl: `{[x]}`, wantErr: "want an index"},
		{tmpl: `{state}`, wantErr: "a path starts with"},
		{tmpl: `{"unterminated}`, wantErr: "not a quoted string"},
		{tmpl: `{..state}`, wantErr: "an empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl, func(t *testing.T) {
			t.Parallel()
			nodes, err := parseJSONPath(tt.tmpl)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, errJSONPath)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var out bytes.Buffer
			require.NoError(t, jsonPathEncoder(nodes)(&out, doc))
			require.Equal(t, tt.want, out.String())
		})
	}
}

// FuzzJSONPath: any template parses or is refused, and one that parses
// runs over a document without panicking.
func FuzzJSONPath(f *testing.F) {
	for _, s := range []string{`{[*].a}`, `{range [*]}{.a}{"\n"}{end}`, `{[-1]['b'].c[0]}`, `x{.}y`, `{range .a}{range .b}{end}{end}`, `{`, `}{`, `{""}`} {
		f.Add(s)
	}
	doc := map[string]any{"a": []any{map[string]any{"b": 1}, "s", nil}, "c": map[string]any{"d": true}}
	f.Fuzz(func(t *testing.T, tmpl string) {
		nodes, err := parseJSONPath(tmpl)
		if err != nil {
			return
		}
		var out bytes.Buffer
		require.NoError(t, jsonPathEncoder(nodes)(&out, doc))
	})
}

func TestSkipFirstLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	g := &globals{noHeaders: true}
	tw := g.listTable(&out)
	_, _ = tw.Write([]byte("A\tB\n"))
	_, _ = tw.Write([]byte("1\t2\n3\t4\n"))
	require.NoError(t, tw.Flush())
	require.Equal(t, "1  2\n3  4\n", out.String())
}
