package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
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
	return matchSecret(s)
}

// matchSecret is secretKind past its filter (maySecret).
func matchSecret(s string) string {
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

func isASCII[T text](s T) bool {
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
func maySecret[T text](s T) bool {
	for i := 0; i < len(s); i++ {
		if !secretFirstByte[s[i]] {
			continue
		}
		switch rest := s[i:]; rest[0] {
		case '=':
			return true
		case '-':
			if hasPrefix(rest, "-----BEGIN") {
				return true
			}
		case 'A':
			if hasPrefix(rest, "AKIA") || hasPrefix(rest, "ASIA") {
				return true
			}
		case 'g':
			if hasPrefix(rest, "gh") {
				return true
			}
		case 'x':
			if hasPrefix(rest, "xox") {
				return true
			}
		case ':':
			if hasPrefix(rest, "://") {
				return true
			}
		case 'b', 'B':
			if hasPrefixFold(rest, "bearer") {
				return true
			}
		default: // 's', 'S'
			if hasPrefixFold(rest, "secret") {
				return true
			}
		}
	}
	return false
}

// hasPrefix is strings.HasPrefix for either form of a text.
func hasPrefix[T text](s T, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if s[i] != prefix[i] {
			return false
		}
	}
	return true
}

// hasPrefixFold reports whether s starts with lower (ASCII letters, lower
// case) in any case: strings.EqualFold(s[:len(lower)], lower), which for
// an ASCII lower holds only where those bytes are ASCII (a byte of a
// multi-byte rune would leave fewer runes than lower has).
func hasPrefixFold[T text](s T, lower string) bool {
	if len(s) < len(lower) {
		return false
	}
	for i := 0; i < len(lower); i++ {
		if s[i]|0x20 != lower[i] {
			return false
		}
	}
	return true
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
// An ASCII name is compared in place, from its end, with the words ending
// in its last letter only; any other goes through strings.ToLower, whose
// Unicode mappings (the Kelvin sign is a 'k') an ASCII comparison would
// miss.
func isCredentialName[T text](name T) bool {
	if !isASCII(name) {
		n := strings.ToLower(nameSeparators.Replace(string(name)))
		for _, c := range credentialNames {
			if strings.HasSuffix(n, c) {
				return true
			}
		}
		return false
	}
	i := len(name)
	for i > 0 && (name[i-1] == '_' || name[i-1] == '-') {
		i--
	}
	if i == 0 {
		return false
	}
	for words := credentialEndings[lowerASCII(name[i-1])]; words != 0; words &= words - 1 {
		if hasCredentialSuffix(name[:i], credentialNames[bits.TrailingZeros32(words)]) {
			return true
		}
	}
	return false
}

// credentialEndings holds, for each byte, the credentialNames ending in it
// (bit i for word i): a member name's last letter rules out the rest.
// TestCredentialEndings checks the words fit its bits.
var credentialEndings = func() (t [256]uint32) {
	for i, w := range credentialNames {
		t[w[len(w)-1]] |= 1 << i
	}
	return t
}()

// hasCredentialSuffix reports whether the ASCII name, lower-cased and rid
// of '_' and '-', ends in word (lower case).
func hasCredentialSuffix[T text](name T, word string) bool {
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
	var sc secretScan
	// The walk reads the bytes as they are, its strings spans of them: no
	// copy of the document and none of its strings.
	if err := walkJSONSpans(raw, sc.token); err != nil {
		// Not JSON (or truncated): scan the bytes as text so nothing escapes.
		if kind := secretKind(string(raw)); kind != "" {
			sc.add("", kind)
		}
	}
	return sc.fs, nil
}

// secretScan is Rule 9's walk: where it is, and its findings so far.
type secretScan struct {
	at   fieldWalk
	fs   []capsule.Finding
	seen map[[2]string]bool // made at the first finding: most capsules have none
}

// token judges every member name and string value: a secret pattern, or a
// credential-named member with a non-blank string value.
func (sc *secretScan) token(tok capsule.JSONToken, s []byte) {
	str, member := sc.at.step(tok, s)
	if !str {
		return
	}
	isKey := tok == capsule.TokenKey
	if maySecret(s) {
		if kind := matchSecret(string(s)); kind != "" {
			if isKey {
				kind = "a member name that is " + kind
			}
			sc.add(sc.at.field(), kind)
			return
		}
	}
	if !isKey && len(member) > 0 && isCredentialName(member) && len(bytes.TrimSpace(s)) > 0 {
		sc.add(sc.at.field(), "a credential-named member with a value")
	}
}

// add records a finding once per field and kind.
func (sc *secretScan) add(field, what string) {
	if sc.seen == nil {
		sc.seen = make(map[[2]string]bool)
	}
	if k := [2]string{field, what}; !sc.seen[k] {
		sc.seen[k] = true
		sc.fs = append(sc.fs, finding(field, "holds %s (value withheld)", what))
	}
}

// frame is one open JSON container of a walk, for renderField.
type frame struct {
	object  bool
	key     string // current member name (objects)
	wantKey bool   // next string token is a member name (objects)
	index   int    // current element (arrays)
}

// spanFrame is a frame of a walk over the received bytes: its member name
// is a span of them (or of an unescaped copy).
type spanFrame struct {
	object bool
	key    []byte
	index  int
}

// fieldWalk follows a walk's tokens to know the field path of each member
// name and string value ("task.title", "context_refs[2]",
// `metadata["a b"]`) and, for values, the name of the member holding it.
// The path is rendered only when asked for (findings): rendering it for
// every string was Rule 9's main cost. Its zero value is ready; it holds
// its first frames in place, not behind a slice pointing into itself,
// which would move every walk's state to the heap.
type fieldWalk struct {
	depth int
	near  [8]spanFrame // frames 0-7: a capsule nests 4 deep
	deep  []spanFrame  // frames 8 and on
	// next says a string value was the last token: its container moves on
	// at the next one, so that its field can be rendered in between.
	next bool
}

// frame is open container i (0 the outermost).
func (w *fieldWalk) frame(i int) *spanFrame {
	if i < len(w.near) {
		return &w.near[i]
	}
	return &w.deep[i-len(w.near)]
}

func (w *fieldWalk) push(f spanFrame) {
	if w.depth < len(w.near) {
		w.near[w.depth] = f
	} else {
		w.deep = append(w.deep[:w.depth-len(w.near)], f)
	}
	w.depth++
}

// step follows tok, s. For a member name or a string value it returns str,
// and for a value the name of the member holding it (empty in an array).
func (w *fieldWalk) step(tok capsule.JSONToken, s []byte) (str bool, member []byte) {
	if w.next {
		w.next = false
		w.advance()
	}
	switch tok {
	case capsule.TokenObjectStart:
		w.push(spanFrame{object: true})
	case capsule.TokenArrayStart:
		w.push(spanFrame{})
	case capsule.TokenObjectEnd, capsule.TokenArrayEnd:
		w.depth--
		w.advance()
	case capsule.TokenKey:
		w.frame(w.depth - 1).key = s
		return true, nil
	case capsule.TokenString:
		w.next = true
		if w.depth > 0 {
			if top := w.frame(w.depth - 1); top.object {
				member = top.key
			}
		}
		return true, member
	default:
		w.advance()
	}
	return false, nil
}

// advance moves the current container past a value.
func (w *fieldWalk) advance() {
	if w.depth > 0 {
		if top := w.frame(w.depth - 1); !top.object {
			top.index++
		}
	}
}

// field renders the path to the current position.
func (w *fieldWalk) field() string {
	stack := make([]frame, w.depth)
	for i := range stack {
		f := w.frame(i)
		stack[i] = frame{object: f.object, key: string(f.key), index: f.index}
	}
	return renderField(stack)
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
