package rules

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// secretKindUngated is secretKind without the per-pattern gates: every
// pattern is run.
func secretKindUngated(s string) string {
	if !maySecret(s) {
		return ""
	}
	for _, p := range secretPatterns {
		if p.re.MatchString(s) {
			return p.desc
		}
	}
	return ""
}

// TestSecretGatesHideNoMatch: the gate of each pattern passes every ASCII
// string the pattern matches, so skipping a pattern whose gate fails never
// changes Rule 9's finding. The strings are each pattern's positives,
// mixed with prose and cut, and random ASCII built from the patterns'
// pieces.
func TestSecretGatesHideNoMatch(t *testing.T) {
	t.Parallel()
	require.Len(t, secretGates, len(secretPatterns))
	seeds := []string{
		"-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----", "AKIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE",
		"Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345", "BEARER\tabcdefghijklmnopqrstu",
		"aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS-SECRET-KEY: wJalrXUtnFEMI/K7MDENG",
		"password=hunter2", "api-key = 'x'", "Token=abc", "postgres://user:pass@db/app", "REDIS://:pw@h",
		"ghp_" + strings.Repeat("a", 36), "ghs_" + strings.Repeat("Z9", 18), "xoxb-1", "xoxp-a",
		"through the high gh gh_ ghx_", "a=b", "://@", "see https://example.com/x?y=1",
	}
	pieces := []string{"gh", "p", "o", "u", "s", "r", "_", "xox", "-", "b", "=", "://", ":", "@", "a", "Z", "9", " ", "\t",
		"AKIA", "ASIA", "0123456789ABCDEF", "bearer", "BeArEr", "secret", "SECRET", "aws", "key", "password", "token",
		"-----BEGIN ", "PRIVATE KEY-----", "'", `"`, "/", "{", "$"}
	r := rand.New(rand.NewPCG(3, 4))
	cases := append([]string(nil), seeds...)
	for _, s := range seeds {
		cases = append(cases, "prose before "+s+" and after", s[:len(s)/2], strings.ToUpper(s), strings.ToLower(s))
	}
	for range 20000 {
		var b strings.Builder
		for n := 1 + r.IntN(12); n > 0; n-- {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		cases = append(cases, b.String())
	}
	matched := make([]int, len(secretPatterns))
	for _, s := range cases {
		for i, p := range secretPatterns {
			if p.re.MatchString(s) {
				matched[i]++
				require.True(t, secretGates[i](s), "pattern %s matches %q, its gate fails", p.name, s)
			}
		}
		require.Equal(t, secretKindUngated(s), secretKind(s), "%q", s)
	}
	for i, n := range matched {
		require.Positive(t, n, "no case matches pattern %s", secretPatterns[i].name)
	}
}
