package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseUserInfo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`{"server":{"name":"s"},"data":{"user":"UABC","account":"PRODUCER","permissions":{}}}`, "PRODUCER"},
		{`{"data":{"account":"$G"}}`, "$G"},
		{`{"error":{"code":400}}`, ""},
		{`{"data":null}`, ""},
		{`{"data":{"account":"` + strings.Repeat("A", maxAccountName+1) + `"}}`, ""},
		{`{"data":{"account":"EVIL\u001b[2J"}}`, `EVIL\x1b[2J`},
		{`not json`, ""},
		{``, ""},
	} {
		require.Equal(t, tt.want, parseUserInfo([]byte(tt.in)), tt.in)
	}
}

// FuzzParseUserInfo: whatever a server answers, the account quoted is
// bounded and printable.
func FuzzParseUserInfo(f *testing.F) {
	for _, s := range []string{
		`{"data":{"account":"PRODUCER"}}`, `{"data":{"account":"\u202e"}}`, `{"data":{}}`, `[]`, `{"data":{"account":7}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		acc := parseUserInfo(b)
		require.Equal(t, printable(acc), acc)
		require.LessOrEqual(t, len(acc), 6*maxAccountName)
	})
}
