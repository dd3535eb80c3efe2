package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docsPending are sagactl commands the docs describe that are built on
// branches of their own: a name here is not checked. Remove it once the
// command is merged, so the test checks its flags too.
var docsPending = map[string]string{}

// docFiles are the documents whose sagactl commands must exist.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../../README.md", "../../../deploy/README.md"}
	for _, glob := range []string{"../../../docs/*.md", "../../../examples/*/README.md"} {
		m, err := filepath.Glob(glob)
		require.NoError(t, err)
		files = append(files, m...)
	}
	return files
}

// codeSpans returns the code of a Markdown document: every line of a fenced
// block and every `inline` span elsewhere (which may wrap), with its line
// number.
func codeSpans(doc string) (spans []string, lines []int) {
	var prose []string
	fenced := false
	for i, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			prose = append(prose, "")
			continue
		}
		if fenced {
			spans, lines = append(spans, line), append(lines, i+1)
			prose = append(prose, "")
			continue
		}
		prose = append(prose, line)
	}
	text := strings.Join(prose, "\n")
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatchIndex(text, -1) {
		spans = append(spans, strings.ReplaceAll(text[m[2]:m[3]], "\n", " "))
		lines = append(lines, strings.Count(text[:m[0]], "\n")+1)
	}
	return spans, lines
}

// sagactlCall finds a sagactl invocation in code ("sagactl ARGS" or
// "go run ./cmd/sagactl ARGS") and returns its words, up to a comment, a
// pipe or the next command.
var sagactlCall = regexp.MustCompile(`(?:^|[\s(/])sagactl\s+([^#;&|)]*)`)

// commandWord is what a sagactl command name looks like.
var commandWord = regexp.MustCompile(`^[a-z][a-z-]*$`)

// TestDocsSagactlCommandsExist: every sagactl command and flag the docs
// show is one sagactl has, so a stranger copying them gets no "unknown
// command".
func TestDocsSagactlCommandsExist(t *testing.T) {
	t.Parallel()
	root := NewRoot(io.Discard, io.Discard)
	// Added by Execute; the docs show them too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	checked := 0
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		spans, lines := codeSpans(string(b))
		for i, span := range spans {
			for _, m := range sagactlCall.FindAllStringSubmatch(span, -1) {
				var words []string
				for _, w := range strings.Fields(strings.NewReplacer(`\|`, " ", "[", " ", "]", " ").Replace(m[1])) {
					words = append(words, w)
				}
				if len(words) == 0 || !commandWord.MatchString(words[0]) && words[0] != "--version" {
					continue // a file name (install ... sagactl /usr/local/bin/), or global flags alone
				}
				where := f + ":" + itoa(lines[i]) + ": sagactl " + m[1]
				if _, ok := docsPending[words[0]]; ok {
					continue
				}
				cmd, rest, err := root.Find(words)
				require.NoError(t, err, where)
				if cmd == root && len(words) > 0 && !strings.HasPrefix(words[0], "-") {
					t.Fatalf("%s: no command %q", where, words[0])
				}
				for _, w := range rest {
					name, ok := strings.CutPrefix(w, "--")
					if !ok {
						continue
					}
					name, _, _ = strings.Cut(name, "=")
					name = strings.TrimRight(name, ".,:")
					if name == "" {
						continue
					}
					require.NotNil(t, cmd.Flag(name), "%s: %q has no flag --%s", where, cmd.CommandPath(), name)
				}
				checked++
			}
		}
	}
	require.Greater(t, checked, 50, "the docs show sagactl commands; the parser found too few")
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}
