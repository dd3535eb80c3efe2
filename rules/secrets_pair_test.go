package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
)

// checkSecretsStrings is Rule 9 as it was before its walk read the bytes
// as received: the walk's tokens as strings (capsule.WalkJSON, which the
// span walk is held to), the container stack built by closures, the
// credential words tried one by one on the lowered name (the reference
// isCredentialName is held to) and the nine searches before the patterns
// (maySecret's reference). The reference of secretsPair.
func checkSecretsStrings(raw []byte) []capsule.Finding {
	var (
		fs    []capsule.Finding
		seen  = map[[2]string]bool{}
		stack []frame
	)
	add := func(field, what string) {
		if k := [2]string{field, what}; !seen[k] {
			seen[k] = true
			fs = append(fs, finding(field, "holds %s (value withheld)", what))
		}
	}
	advance := func() {
		if n := len(stack); n > 0 {
			if top := &stack[n-1]; top.object {
				top.wantKey = true
			} else {
				top.index++
			}
		}
	}
	visit := func(s string, isKey bool, member string) {
		if kind := secretKindSearches(s); kind != "" {
			if isKey {
				kind = "a member name that is " + kind
			}
			add(renderField(stack), kind)
			return
		}
		if !isKey && member != "" && strings.TrimSpace(s) != "" && isCredentialNameLowered(member) {
			add(renderField(stack), "a credential-named member with a value")
		}
	}
	err := capsule.WalkJSON(raw, func(tok capsule.JSONToken, s string) {
		switch tok {
		case capsule.TokenObjectStart:
			stack = append(stack, frame{object: true, wantKey: true})
		case capsule.TokenArrayStart:
			stack = append(stack, frame{})
		case capsule.TokenObjectEnd, capsule.TokenArrayEnd:
			stack = stack[:len(stack)-1]
			advance()
		case capsule.TokenKey:
			top := &stack[len(stack)-1]
			top.key, top.wantKey = s, false
			visit(s, true, "")
		case capsule.TokenString:
			member := ""
			if n := len(stack); n > 0 && stack[n-1].object {
				member = stack[n-1].key
			}
			visit(s, false, member)
			advance()
		default:
			advance()
		}
	})
	if err != nil {
		if kind := secretKindSearches(string(raw)); kind != "" {
			add("", kind)
		}
	}
	return fs
}

// secretKindSearches is secretKind with the nine searches for its filter
// and every pattern run.
func secretKindSearches(s string) string {
	if !maySecretSearches(s) {
		return ""
	}
	for _, p := range secretPatterns {
		if p.re.MatchString(s) {
			return p.desc
		}
	}
	return ""
}

// secretsPair holds Rule 9 to checkSecretsStrings: the same findings, in
// the same order, with the same text. Inputs: the example capsules and
// documents with secrets, credential members (in any case, with
// separators, escaped, non-ASCII, blank in Unicode's sense), redacted and
// quoted member names, deep nesting; generated, example capsules with such
// members and values put into their objects and arrays, some of them
// broken by a byte (the text scan then runs).
var secretsPair = differential.Pair[[]byte, []capsule.Finding]{
	Name: "Secrets",
	Fast: func(raw []byte) ([]capsule.Finding, error) {
		if raw == nil {
			raw = []byte{} // nil Raw means "encode the capsule"
		}
		return checkSecrets(context.Background(), Input{Raw: raw})
	},
	Reference: func(raw []byte) ([]capsule.Finding, error) { return checkSecretsStrings(raw), nil },
	Seeds: func() (out [][]byte) {
		for _, c := range secretsCases {
			out = append(out, []byte(c))
		}
		return append(out, exampleCapsules()...)
	}(),
	Generate: func(r *rand.Rand) []byte {
		b := withMembers(r)
		if r.IntN(16) == 0 {
			b[r.IntN(len(b))] = `{}[],:"\ x0`[r.IntN(11)]
		}
		return b
	},
	Count:  2000,
	Decode: bytesInput,
	Encode: bytesOutput,
}

// secretsCases are Rule 9's edges as documents.
var secretsCases = []string{
	``, `{}`, `"password=hunter2"`, `["token=abc"]`, `{"password":"x"}`, `{"password":" "}`, `{"password":"\u2003"}`,
	`{"password":"\u00a0x"}`, `{"Pass\u0077ord":"x"}`, `{"tO` + "\u212a" + `EN":"v"}`, `{"api-KEY_":"v"}`, `{"_":"v"}`, `{"":"v"}`,
	`{"a":{"b c":["x",{"password":"p","k":1}],"a":"dup"},"token":"ghp_0123456789abcdefghijABCDEFGHIJ012345"}`,
	`{"ghp_0123456789abcdefghijABCDEFGHIJ012345":{"token":"v"}}`, `{"x":[[["secret=1"],"AKIAABCDEFGHIJKLMNOP"]]}`,
	`{"` + strings.Repeat("é", 70) + `":{"password":"v"}}`, `{"password":["v"],"password":{"a":"token=x"}}`,
	`{"a":` + strings.Repeat(`{"b":`, 12) + `{"secret":"s"}` + strings.Repeat(`}`, 12) + `}`,
	`[` + strings.Repeat(`[`, 12) + `"bearer abcdefghijklmnopqrstuvwxyz"` + strings.Repeat(`]`, 12) + `]`,
	`{"password":"x"`, `{"a":"postgres://u:p@h/d"`, "{\"token\":\"\xff\"}", `{"token":"\ud800"}`, `{"k":"a\u003db"}`,
	// Siblings past the walk's eight in-place frames: a container closed
	// and another opened at the same depth must not find the first's
	// frame (its index, its member name).
	strings.Repeat(`[`, 9) + `["a",{"password":"p"}],[{"k":"v"},{"x":1,"password":"q","y":["secret=1"]}],"token=t"` + strings.Repeat(`]`, 9),
	strings.Repeat(`{"o":`, 9) + `{"a":{"password":"p"},"b c":{"k":{"secret":"s"}},"d":["x",{"token":"t"}]}` + strings.Repeat(`}`, 9),
}

// credentialish are member names and values near Rule 9's words.
var credentialish = []string{"password", "Password", "PASS_WORD", "db-passwd", "api_key", "apiKey", "x-token", "TOKEN_",
	"secret", "my_secret_key", "privateKey", "accesskey", "tO\u212aEN", "ſecret", "password_policy", "key", "token-",
	"", " ", "\t", "\u2003", "\u00a0", "v", "hunter2", "a b", "é", "token=abc", "-----BEGIN RSA PRIVATE KEY-----",
	"AKIAABCDEFGHIJKLMNOP", "https://u:p@h/", "xoxb-1", "ghp_0123456789abcdefghijABCDEFGHIJ012345", "through",
	"bearer abcdefghijklmnopqrstuvwxyz", "secret", strings.Repeat("k", 70), "\xff", "\"", "\\"}

// jsonText is s as a JSON string: encoded (escapes for quotes, controls,
// '<', and U+FFFD for invalid UTF-8), with its ASCII letters sometimes
// written as \u escapes, or raw.
func jsonText(r *rand.Rand, s string) string {
	switch r.IntN(3) {
	case 0:
		b, _ := json.Marshal(s)
		return string(b)
	case 1:
		var b strings.Builder
		b.WriteByte('"')
		for _, c := range []byte(s) {
			if 'a' <= c && c <= 'z' && r.IntN(3) == 0 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	return `"` + s + `"`
}

// jsonValue is a random value: mostly a string, else a number, an array
// or an object of members like withMembers puts in.
func jsonValue(r *rand.Rand, depth int) string {
	pick := func() string {
		return credentialish[r.IntN(len(credentialish))] + credentialish[r.IntN(len(credentialish))]
	}
	switch n := r.IntN(8); {
	case n < 5 || depth > 3:
		return jsonText(r, pick())
	case n == 5:
		return "1"
	case n == 6:
		return `[` + jsonValue(r, depth+1) + `,` + jsonValue(r, depth+1) + `]`
	default:
		return `{` + jsonText(r, pick()) + `:` + jsonValue(r, depth+1) + `}`
	}
}

// withMembers is an example capsule with one to three members or
// elements put in right after the opening of some of its objects and
// arrays.
func withMembers(r *rand.Rand) []byte {
	ex := exampleCapsules()
	b := string(ex[r.IntN(len(ex))])
	for range 1 + r.IntN(3) {
		at := r.IntN(len(b))
		i := strings.IndexAny(b[at:], "{[")
		if i < 0 {
			continue
		}
		at += i + 1
		put := jsonValue(r, 0) + ","
		if b[at-1] == '{' {
			put = jsonText(r, credentialish[r.IntN(len(credentialish))]) + ":" + put
		}
		b = b[:at] + put + b[at:]
	}
	return []byte(b)
}

// TestCredentialEndings: every credential word has a bit of its own in
// credentialEndings, under its last letter.
func TestCredentialEndings(t *testing.T) {
	t.Parallel()
	require.LessOrEqual(t, len(credentialNames), 32, "one bit of a uint32 each")
	for i, w := range credentialNames {
		require.NotZero(t, credentialEndings[w[len(w)-1]]&(1<<i), w)
	}
}

// TestSecretsFindSecrets: the pair's seeds are not all quiet, so it
// compares findings, not only their absence.
func TestSecretsFindSecrets(t *testing.T) {
	t.Parallel()
	n := 0
	for _, in := range secretsPair.Seeds {
		fs, _ := secretsPair.Fast(in)
		n += len(fs)
	}
	require.Greater(t, n, 20)
}
