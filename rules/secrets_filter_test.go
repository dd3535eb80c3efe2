package rules

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// maySecretSearches is maySecret as it was: one search per substring, kept
// as the reference the one-pass filter is held to.
func maySecretSearches(s string) bool {
	for _, sub := range []string{"-----BEGIN", "AKIA", "ASIA", "=", "gh", "xox", "://"} {
		if strings.Contains(s, sub) {
			return true
		}
	}
	for i := 0; i+6 <= len(s); i++ {
		switch s[i] | 0x20 {
		case 'b':
			if strings.EqualFold(s[i:i+6], "bearer") {
				return true
			}
		case 's':
			if strings.EqualFold(s[i:i+6], "secret") {
				return true
			}
		}
	}
	return false
}

// isCredentialNameLowered is isCredentialName as it was: the name lowered
// and rid of separators, then a suffix test per credential word.
func isCredentialNameLowered(name string) bool {
	n := strings.ToLower(nameSeparators.Replace(name))
	for _, c := range credentialNames {
		if strings.HasSuffix(n, c) {
			return true
		}
	}
	return false
}

// randomText strings together fragments that start, end or nearly make
// maySecret's substrings and the credential words, in any case, with
// separators and non-ASCII letters that lower-case to ASCII (the Kelvin
// sign, the dotted capital I).
func randomText(r *rand.Rand) string {
	frags := []string{"-----BEGIN", "----BEGIN", "-", "BEGIN", "AKIA", "AKI", "ASIA", "ASI", "A", "=", "g", "h", "gh", "xox", "xo",
		"x", "://", ":/", ":", "/", "bearer", "BeArEr", "beare", "b", "secret", "SECRET", "secre", "s", "S", "ſecret",
		"password", "PassWord", "pass", "word", "passwd", "api", "key", "apikey", "token", "TOKEN", "toKen", "tO\u212aEN",
		"access", "private", "privatekey", "_", "-", "__", "-_", " ", "é", "İ", "\xff", "a", "Z", "0"}
	var b strings.Builder
	for range r.IntN(7) {
		b.WriteString(frags[r.IntN(len(frags))])
	}
	return b.String()
}

// TestMaySecretAsSearches holds the one-pass filter to the nine searches
// over 50,000 strings made of near and whole substrings.
func TestMaySecretAsSearches(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(23, 29))
	for _, s := range []string{"", "=", "gh", "g", "-----BEGIN", "-----BEGI", "xox", "://", "bearer", "BEARE", "sEcReT", "ſecret", "AKIA", "ASI"} {
		if maySecret(s) != maySecretSearches(s) {
			t.Fatalf("%q: one pass %v, searches %v", s, maySecret(s), maySecretSearches(s))
		}
	}
	for range 50000 {
		s := randomText(r)
		if maySecret(s) != maySecretSearches(s) {
			t.Fatalf("%q: one pass %v, searches %v", s, maySecret(s), maySecretSearches(s))
		}
	}
}

// TestCredentialNameAsLowered holds the in-place comparison to lowering the
// name, over 50,000 names (ASCII and not).
func TestCredentialNameAsLowered(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(31, 37))
	for _, s := range []string{"", "_", "token", "TOKEN_", "api-key", "API__KEY", "tO\u212aEN", "password_policy", "my_secret_key", "ken"} {
		if isCredentialName(s) != isCredentialNameLowered(s) {
			t.Fatalf("%q: in place %v, lowered %v", s, isCredentialName(s), isCredentialNameLowered(s))
		}
	}
	for range 50000 {
		s := randomText(r)
		if isCredentialName(s) != isCredentialNameLowered(s) {
			t.Fatalf("%q: in place %v, lowered %v", s, isCredentialName(s), isCredentialNameLowered(s))
		}
	}
}

// TestValidAgentIDAsPattern holds the written-out agent id check to
// agentIDPattern over 50,000 ids: every allowed byte and some others,
// lengths around the 128 limit, non-ASCII and a trailing newline.
func TestValidAgentIDAsPattern(t *testing.T) {
	t.Parallel()
	alphabet := []string{"a", "Z", "0", "9", "_", ".", ":", "@", "-", " ", "/", "é", "\n", "\xff", "+", "\x00"}
	for _, s := range []string{"", "a", "_a", "-", "a-b.c:d@e_f", strings.Repeat("a", 127), strings.Repeat("a", 128),
		strings.Repeat("a", 129), "a\n", "é", "9" + strings.Repeat("_", 127), "9" + strings.Repeat("_", 128)} {
		if ValidAgentID(s) != agentIDPattern.MatchString(s) {
			t.Fatalf("%q: written out %v, pattern %v", s, ValidAgentID(s), agentIDPattern.MatchString(s))
		}
	}
	r := rand.New(rand.NewPCG(59, 61))
	for range 50000 {
		var b strings.Builder
		n := r.IntN(6)
		if r.IntN(4) == 0 {
			n = 120 + r.IntN(12)
		}
		for range n {
			if r.IntN(3) > 0 {
				b.WriteString(alphabet[r.IntN(4)])
			} else {
				b.WriteString(alphabet[r.IntN(len(alphabet))])
			}
		}
		s := b.String()
		if ValidAgentID(s) != agentIDPattern.MatchString(s) {
			t.Fatalf("%q: written out %v, pattern %v", s, ValidAgentID(s), agentIDPattern.MatchString(s))
		}
	}
}
