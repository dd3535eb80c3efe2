package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sagad/sagad/capsule"
)

// secretPattern is one kind of credential-like text Rule 9 looks for.
type secretPattern struct {
	name string // stable name shown by `sagactl rules`
	desc string // what a finding says was found; never the text itself
	re   *regexp.Regexp
}

// secretPatterns are matched against every string value and member name of
// the capsule, after JSON unescaping.
var secretPatterns = []secretPattern{
	{"private_key_block", "a private key block",
		regexp.MustCompile(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----`)},
	{"aws_access_key_id", "an AWS access key id",
		regexp.MustCompile(`(?:AKIA|ASIA)[0-9A-Z]{16}`)},
	{"bearer_token", "a bearer token",
		regexp.MustCompile(`(?i)\bbearer[ \t]+[A-Za-z0-9._~+/=-]{20,}`)},
	// The AWS secret key forms of credentials files, environments and YAML,
	// which also use ':' ("aws_secret_access_key: wJalr…").
	{"aws_secret_access_key", "an AWS secret access key",
		regexp.MustCompile(`(?i)aws[_-]?secret(?:[_-]?access)?[_-]?key["']?[ \t]*[:=][ \t]*["']?[A-Za-z0-9/+]{16}`)},
	// A name ending in a credential word, then '=' and a value, with optional
	// quotes ("AWS_SECRET_ACCESS_KEY=…", `secret_key = "…"`, "token=…"). The
	// word must end the name, so "password_policy=strict" is no finding; a
	// placeholder value ("<your key>", "${TOKEN}") is none either.
	{"credential_assignment", "a password=/secret=/token=/api_key=/secret_key= assignment",
		regexp.MustCompile(`(?i)(?:password|passwd|secret|api[_-]?key|token|access[_-]?key|secret[_-]?key|private[_-]?key)["']?[ \t]*=[ \t]*["']?[^\s&"',;<$]`)},
	// A URL whose user info carries a password: "postgres://user:pass@host",
	// mysql, mongodb+srv, redis ("redis://:pass@host"), amqp, https… A
	// placeholder password ("${DB_PASSWORD}", "<password>") is no finding.
	{"url_password", "a password in a URL",
		regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s/:@]*:[^\s/@${<][^\s/@]*@`)},
	{"github_token", "a GitHub token",
		regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{36}`)},
	{"slack_token", "a Slack token",
		regexp.MustCompile(`xox[baprs]-[A-Za-z0-9]`)},
}

// credentialMember is the JSON form of a credential assignment:
// {"password": "…"} rather than "password=…".
const credentialMember = "credential_member"

// credentialNames are member-name endings (lower case, '_' and '-' removed)
// whose non-blank string values count as credentials.
var credentialNames = []string{"password", "passwd", "secret", "apikey", "token", "accesskey", "secretkey", "privatekey"}

func secretPatternNames() []string {
	names := make([]string, 0, len(secretPatterns)+1)
	for _, p := range secretPatterns {
		names = append(names, p.name)
	}
	return append(names, credentialMember)
}

// secretKind returns the description of the first pattern s matches, or "".
func secretKind(s string) string {
	if !maySecret(s) {
		return ""
	}
	// A string that passes the filter mostly holds one pattern's literal
	// ("=", "://", "gh" of "through"): in ASCII text, where a
	// case-insensitive pattern can only match ASCII letters, a pattern
	// whose literal is absent cannot match and is not run.
	ascii := isASCII(s)
	for i, p := range secretPatterns {
		if ascii && !secretGates[i](s) {
			continue
		}
		if p.re.MatchString(s) {
			return p.desc
		}
	}
	return ""
}

// secretGates holds, for each of secretPatterns in order, a test that
// every ASCII string the pattern matches passes: the literal the pattern
// cannot match without.
var secretGates = [...]func(string) bool{
	func(s string) bool { return strings.Contains(s, "-----BEGIN ") },
	func(s string) bool { return strings.Contains(s, "AKIA") || strings.Contains(s, "ASIA") },
	func(s string) bool { return containsFoldASCII(s, "bearer") },
	func(s string) bool { return containsFoldASCII(s, "secret") },
	func(s string) bool { return strings.Contains(s, "=") },
	func(s string) bool { return strings.Contains(s, "://") && strings.Contains(s, "@") },
	func(s string) bool {
		for i := strings.Index(s, "gh"); i >= 0 && i+3 < len(s); {
			if strings.IndexByte("pousr", s[i+2]) >= 0 && s[i+3] == '_' {
				return true
			}
			j := strings.Index(s[i+1:], "gh")
			if j < 0 {
				return false
			}
			i += 1 + j
		}
		return false
	},
	func(s string) bool { return strings.Contains(s, "xox") },
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// containsFoldASCII reports whether s holds lower (ASCII, lower case) in
// any case.
func containsFoldASCII(s, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		if s[i]|0x20 == lower[0] && strings.EqualFold(s[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}

// maySecret is a cheap filter before the patterns: every pattern needs one
// of "-----BEGIN", "AKIA", "ASIA", "=", "gh", "xox", "://", or "bearer" or
// "secret" in any case (aws_secret_access_key: …), and almost no capsule
// string holds any. One pass looks for all of them: Rule 9 runs it on every
// string of every capsule, and nine searches of each string were most of
// the rule's time. TestMaySecretAsSearches holds it to the nine searches.
func maySecret(s string) bool {
	for i := 0; i < len(s); i++ {
		if !secretFirstByte[s[i]] {
			continue
		}
		switch rest := s[i:]; rest[0] {
		case '=':
			return true
		case '-':
			if strings.HasPrefix(rest, "-----BEGIN") {
				return true
			}
		case 'A':
			if strings.HasPrefix(rest, "AKIA") || strings.HasPrefix(rest, "ASIA") {
				return true
			}
		case 'g':
			if strings.HasPrefix(rest, "gh") {
				return true
			}
		case 'x':
			if strings.HasPrefix(rest, "xox") {
				return true
			}
		case ':':
			if strings.HasPrefix(rest, "://") {
				return true
			}
		case 'b', 'B':
			if len(rest) >= 6 && strings.EqualFold(rest[:6], "bearer") {
				return true
			}
		default: // 's', 'S'
			if len(rest) >= 6 && strings.EqualFold(rest[:6], "secret") {
				return true
			}
		}
	}
	return false
}

// secretFirstByte marks the bytes maySecret's substrings start with.
var secretFirstByte = func() (t [256]bool) {
	for _, c := range []byte("=-Agx:bBsS") {
		t[c] = true
	}
	return t
}()

// isCredentialName reports whether a member name names a credential: it
// ends in one of credentialNames once lower-cased and rid of '_' and '-'.
// An ASCII name is compared in place, from its end; any other goes through
// strings.ToLower, whose Unicode mappings (the Kelvin sign is a 'k') an
// ASCII comparison would miss.
func isCredentialName(name string) bool {
	if !isASCII(name) {
		n := strings.ToLower(nameSeparators.Replace(name))
		for _, c := range credentialNames {
			if strings.HasSuffix(n, c) {
				return true
			}
		}
		return false
	}
	for _, c := range credentialNames {
		if hasCredentialSuffix(name, c) {
			return true
		}
	}
	return false
}

// hasCredentialSuffix reports whether the ASCII name, lower-cased and rid
// of '_' and '-', ends in word (lower case).
func hasCredentialSuffix(name, word string) bool {
	i := len(name)
	for j := len(word) - 1; j >= 0; j-- {
		for i > 0 && (name[i-1] == '_' || name[i-1] == '-') {
			i--
		}
		if i == 0 || lowerASCII(name[i-1]) != word[j] {
			return false
		}
		i--
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Rule 9: no credential-like text anywhere in the capsule. The raw bytes are
// walked token by token, so every string value and member name is seen once
// unescaped, including values a map decode would drop (duplicate members).
// Findings name the field and the kind of secret, never the secret.
func checkSecrets(_ context.Context, in Input) ([]capsule.Finding, error) {
	raw := in.Raw
	if raw == nil {
		b, err := json.Marshal(in.Capsule)
		if err != nil {
			return nil, fmt.Errorf("encode capsule to scan it: %w", err)
		}
		raw = b
	}
	var (
		fs   []capsule.Finding
		seen map[[2]string]bool // made at the first finding: most capsules have none
	)
	add := func(field, what string) {
		if seen == nil {
			seen = make(map[[2]string]bool)
		}
		if k := [2]string{field, what}; !seen[k] {
			seen[k] = true
			fs = append(fs, finding(field, "holds %s (value withheld)", what))
		}
	}
	err := walkStrings(raw, func(field func() string, s string, isKey bool, member string) {
		if kind := secretKind(s); kind != "" {
			if isKey {
				kind = "a member name that is " + kind
			}
			add(field(), kind)
			return
		}
		if !isKey && member != "" && strings.TrimSpace(s) != "" && isCredentialName(member) {
			add(field(), "a credential-named member with a value")
		}
	})
	if err != nil {
		// Not JSON (or truncated): scan the bytes as text so nothing escapes.
		if kind := secretKind(string(raw)); kind != "" {
			add("", kind)
		}
	}
	return fs, nil
}

// frame is one open JSON container during walkStrings.
type frame struct {
	object  bool
	key     string // current member name (objects)
	wantKey bool   // next string token is a member name (objects)
	index   int    // current element (arrays)
}

// walkStrings calls visit for every member name (isKey) and string value in
// raw, with the field path of the value or member ("task.title",
// "context_refs[2]", `metadata["a b"]`) and, for values, the name of the
// member holding it ("" inside arrays). It returns the first syntax error.
//
// The field path is built only when visit asks for it: it is needed for
// findings only, and rendering it for every string was Rule 9's main cost.
func walkStrings(raw []byte, visit func(field func() string, s string, isKey bool, member string)) error {
	stack := make([]frame, 0, 8) // a capsule nests 4 deep: no regrowth
	advance := func() {
		if n := len(stack); n > 0 {
			if top := &stack[n-1]; top.object {
				top.wantKey = true
			} else {
				top.index++
			}
		}
	}
	field := func() string { return renderField(stack) }
	// One copy of the bytes for the whole walk: the strings visit gets are
	// its substrings, not one allocation each.
	return walkJSONSpans(string(raw), func(tok capsule.JSONToken, s string) {
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
			visit(field, s, true, "")
		case capsule.TokenString:
			member := ""
			if n := len(stack); n > 0 && stack[n-1].object {
				member = stack[n-1].key
			}
			visit(field, s, false, member)
			advance()
		default:
			advance()
		}
	})
}

// maxKeyInField bounds how much of a member name a field path repeats.
const maxKeyInField = 64

// renderField renders the path to the current position of stack. Member
// names that themselves look like secrets are shown as "<redacted>".
func renderField(stack []frame) string {
	var b strings.Builder
	for _, f := range stack {
		if !f.object {
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
			continue
		}
		switch k := f.key; {
		case secretKind(k) != "":
			b.WriteString("[<redacted>]")
		case isIdentifier(k):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		default:
			if r := []rune(k); len(r) > maxKeyInField {
				k = string(r[:maxKeyInField]) + "…"
			}
			b.WriteString("[" + strconv.Quote(k) + "]")
		}
	}
	return b.String()
}

// isIdentifier reports whether a member name can be written bare in a field
// path.
func isIdentifier(s string) bool {
	if s == "" || len(s) > maxKeyInField {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && ('0' <= c && c <= '9' || c == '-')) {
			return false
		}
	}
	return true
}

// nameSeparators drops the separators of member names ("api_key", "api-key").
var nameSeparators = strings.NewReplacer("_", "", "-", "")
