package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestPrintable(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain text, é 😀 | `x`", "plain text, é 😀 | `x`"},
		{"\x1b[2J\x1b]0;pwned\x07", `\x1b[2J\x1b]0;pwned\a`},
		{"line\nforged\trow\r", `line\nforged\trow\r`},
		{"nul\x00del\x7f", `nul\x00del\x7f`},
		{"c1 \u009b31m", `c1 \u009b31m`}, // a rune, unlike the byte \x9b
		{"bidi \u202eevil\u2066", `bidi \u202eevil\u2066`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
		{`already \x1b escaped`, `already \x1b escaped`},
	}
	for _, tc := range tests {
		got := printable(tc.in)
		require.Equal(t, tc.want, got, "printable(%q)", tc.in)
		require.Equal(t, got, printable(got), "printable is idempotent on %q", tc.in)
	}
}

// FuzzPrintable: whatever the input, the output is valid UTF-8 without a
// control or bidi character, and input that needs no escaping is left as it
// is.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"", "ok", "\x1b[31m", "\xff", "\u202e", "a\tb\nc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := printable(s)
		require.True(t, utf8.ValidString(got), "%q", got)
		for _, r := range got {
			if unprintable(r) {
				t.Fatalf("printable(%q) = %q keeps %U", s, got, r)
			}
		}
		if utf8.ValidString(s) && strings.IndexFunc(s, unprintable) < 0 {
			require.Equal(t, s, got)
		}
	})
}

func TestReadLimited(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	require.NoError(t, os.WriteFile(small, []byte("0123456789"), 0o600))
	big := filepath.Join(dir, "big")
	require.NoError(t, os.WriteFile(big, []byte("01234567890"), 0o600))

	b, err := readLimited(nil, small, 10)
	require.NoError(t, err)
	require.Equal(t, "0123456789", string(b))
	_, err = readLimited(nil, big, 10)
	require.ErrorIs(t, err, ErrInputTooLarge)

	b, err = readLimited(strings.NewReader("0123456789"), "-", 10)
	require.NoError(t, err)
	require.Len(t, b, 10)
	_, err = readLimited(strings.NewReader("01234567890"), "-", 10)
	require.ErrorIs(t, err, ErrInputTooLarge)

	// An endless stream stops one byte past the limit.
	endless := &countingReader{}
	_, err = readLimited(endless, "-", 1000)
	require.ErrorIs(t, err, ErrInputTooLarge)
	require.LessOrEqual(t, endless.n, int64(1001+bytes.MinRead))

	_, err = readLimited(nil, filepath.Join(dir, "missing"), 10)
	require.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}

// countingReader is an endless stream of zeros that counts what was read.
type countingReader struct{ n int64 }

func (r *countingReader) Read(p []byte) (int, error) {
	clear(p)
	r.n += int64(len(p))
	return len(p), nil
}

func TestPublishDevZeroFailsFast(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	var out, errOut bytes.Buffer
	code := Main([]string{"publish", "--raw", "/dev/zero", "--nats-url", "nats://127.0.0.1:1"}, &out, &errOut)
	require.Equal(t, ExitUsage, code)
	require.Equal(t, "sagactl: read /dev/zero: input exceeds 1048576 bytes\n", errOut.String())
}
