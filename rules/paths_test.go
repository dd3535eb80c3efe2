package rules

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestCheckPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want error // nil: safe
	}{
		{"src/a.go", nil},
		{".", nil},
		{"./src//b/", nil},
		{"a..b/c...", nil},
		{".git", nil},
		{"", ErrEmptyPath},
		{"src/\xff", ErrInvalidUTF8},
		{"src/a\x00", ErrControlChar},
		{"src/a\x7f", ErrControlChar},
		{"src/\u0085", ErrControlChar},
		{"src/\u202egnp.exe", ErrControlChar},
		{"src\\a.go", ErrBackslash},
		{"C:src", ErrDriveLetter},
		{"/etc/passwd", ErrAbsolute},
		{"//server/share", ErrAbsolute},
		{"..", ErrTraversal},
		{"../x", ErrTraversal},
		{"a/../b", ErrTraversal},
		{"a/..", ErrTraversal},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			err := CheckPath(tc.path)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			var pe *PathError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.path, pe.Path)
		})
	}
}

func TestCheckRef(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckRef("file:src/a.go"))
	require.NoError(t, CheckRef("kv:bucket/key"))
	require.ErrorIs(t, CheckRef("file:../a"), ErrTraversal)
	require.ErrorIs(t, CheckRef("file://host/a"), ErrAbsolute)
	require.ErrorIs(t, CheckRef("file:"), ErrEmptyPath)
	require.ErrorIs(t, CheckRef("file:C:/a"), ErrDriveLetter)
	require.ErrorIs(t, CheckRef("no scheme/../x"), ErrTraversal)
}

func TestSplitRef(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ref, scheme, rest string
		ok                bool
	}{
		{"file:src/a.go", "file", "src/a.go", true},
		{"artifact:01J/1:x", "artifact", "01J/1:x", true},
		{"svn+ssh:x", "svn+ssh", "x", true},
		{"FILE:x", "FILE", "x", true},
		{"src/a.go", "", "src/a.go", false},
		{":x", "", ":x", false},
		{"1x:y", "", "1x:y", false},
		{"src/a:b", "", "src/a:b", false},
	}
	for _, tc := range tests {
		scheme, rest, ok := SplitRef(tc.ref)
		require.Equal(t, tc.scheme, scheme, tc.ref)
		require.Equal(t, tc.rest, rest, tc.ref)
		require.Equal(t, tc.ok, ok, tc.ref)
	}
	p, ok := FilePath("file:src/a.go")
	require.True(t, ok)
	require.Equal(t, "src/a.go", p)
	_, ok = FilePath("kv:src/a.go")
	require.False(t, ok)
	_, ok = FilePath("FILE:src/a.go")
	require.False(t, ok)
}

func TestWithin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		parent, child string
		want, fold    bool
	}{
		{"src", "src", true, true},
		{"src", "src/a.go", true, true},
		{"src/", "./src/b/c", true, true},
		{".", "anything/at/all", true, true},
		{".", ".", true, true},
		{"src", "srcx", false, false},
		{"src/a", "src", false, false},
		{"src", "src/../x", false, false},
		{"src", "../src/a", false, false},
		{".", "../x", false, false},
		{".", "/etc", false, false},
		{"/", "/etc", false, false},
		{"..", "../x", false, false},
		{"", "src", false, false},
		{"src", "", false, false},
		{".GIT", ".git/config", false, true},
		{"Secrets", "secrets", false, true},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Within(tc.parent, tc.child), "Within(%q, %q)", tc.parent, tc.child)
		require.Equal(t, tc.fold, WithinFold(tc.parent, tc.child), "WithinFold(%q, %q)", tc.parent, tc.child)
	}
}

// escapesWorkspace reports whether a cleaned path leaves the workspace.
func escapesWorkspace(p string) bool {
	c := path.Clean(p)
	return c == ".." || strings.HasPrefix(c, "../") || path.IsAbs(c)
}

// FuzzCheckPath: CheckPath never panics, and a path it accepts is valid UTF-8
// without control characters or backslashes and stays inside the workspace
// after path.Clean. Seeds: testdata/fuzz/FuzzCheckPath.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"src/a.go", ".", "..", "a/../b", "/abs", `C:\x`, "a\x00b", "\xff", "", "./a//b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := CheckPath(p)
		refErr := CheckRef("file:" + p)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("CheckPath(%q) = %v but CheckRef(file:…) = %v", p, err, refErr)
		}
		if err != nil {
			requireReason(t, p, err)
			return
		}
		if !utf8.ValidString(p) || strings.ContainsAny(p, "\\\x00\x7f") {
			t.Fatalf("accepted %q", p)
		}
		if escapesWorkspace(p) {
			t.Fatalf("accepted %q, which escapes as %q", p, path.Clean(p))
		}
		if !Within(".", p) || !Within(p, p) || !WithinFold(p, p) {
			t.Fatalf("safe path %q is not within the workspace or itself", p)
		}
	})
}

// FuzzWithin: Within never panics; when it holds, the child neither escapes
// nor differs from the parent except by extra trailing segments; Within
// implies WithinFold. Seeds: testdata/fuzz/FuzzWithin.
func FuzzWithin(f *testing.F) {
	for _, s := range [][2]string{
		{"src", "src/a.go"}, {"src", "srcx"}, {".", "../x"}, {"src", "src/../../x"},
		{"a/b", "a"}, {"", ""}, {"/", "/etc"}, {".GIT", ".git/x"}, {"src/", "./src"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, parent, child string) {
		in := Within(parent, child)
		fold := WithinFold(parent, child)
		if got := withinFoldIndex([]string{parent}, child) == 0; got != fold {
			t.Fatalf("withinFoldIndex([%q], %q) = %v, WithinFold %v", parent, child, got, fold)
		}
		if in && !fold {
			t.Fatalf("Within(%q, %q) but not WithinFold", parent, child)
		}
		if !in {
			return
		}
		if escapesWorkspace(child) || escapesWorkspace(parent) {
			t.Fatalf("Within(%q, %q) with an escaping path", parent, child)
		}
		p, c := path.Clean(parent), path.Clean(child)
		if p != "." && c != p && !strings.HasPrefix(c, p+"/") {
			t.Fatalf("Within(%q, %q): %q is not under %q", parent, child, c, p)
		}
		if CheckPath(child) == nil && CheckPath(parent) == nil && !Within(".", child) {
			t.Fatalf("safe child %q not in the workspace", child)
		}
	})
}

// requireReason: err is a *PathError naming p and wrapping exactly one of
// the documented reasons.
func requireReason(t *testing.T, p string, err error) {
	t.Helper()
	var pe *PathError
	if !errors.As(err, &pe) || pe.Path != p {
		t.Fatalf("CheckPath(%q) = %#v, want a *PathError for it", p, err)
	}
	n := 0
	for _, reason := range []error{ErrEmptyPath, ErrInvalidUTF8, ErrControlChar, ErrBackslash, ErrDriveLetter, ErrAbsolute, ErrTraversal} {
		if errors.Is(err, reason) {
			n++
		}
	}
	if n != 1 || err.Error() == "" {
		t.Fatalf("CheckPath(%q) = %v: %d reasons", p, err, n)
	}
}

// FuzzCheckRef: the ref parser and check agree: a ref is safe exactly when
// the part after its scheme (the whole ref without one) is a safe path;
// FilePath finds a path in "file:" refs only, the same part; refusals are
// typed. Seeds: below and testdata/fuzz/FuzzCheckRef.
func FuzzCheckRef(f *testing.F) {
	for _, s := range []string{"file:src/a.go", "file:../x", "kv:/abs", "artifact:c/1", "FILE:x", "file:", "a+b-c.d:x", "1x:y", ":x", "file:a:b", "C:\\x", "file:a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		err := CheckRef(ref)
		scheme, rest, ok := SplitRef(ref)
		if err != nil {
			requireReason(t, rest, err)
		}
		if (err == nil) != (CheckPath(rest) == nil) {
			t.Fatalf("CheckRef(%q) = %v, but CheckPath(%q) = %v", ref, err, rest, CheckPath(rest))
		}
		p, isFile := FilePath(ref)
		if isFile != (ok && scheme == "file") {
			t.Fatalf("FilePath(%q) = %q, %v with scheme %q, %v", ref, p, isFile, scheme, ok)
		}
		if isFile && p != rest {
			t.Fatalf("FilePath(%q) = %q, want %q", ref, p, rest)
		}
		if err == nil && isFile && !Within(".", p) {
			t.Fatalf("safe file ref %q is outside the workspace", ref)
		}
	})
}

// FuzzSplitRef: SplitRef never panics and splits losslessly.
func FuzzSplitRef(f *testing.F) {
	for _, s := range []string{"file:src/a.go", "kv:", ":", "a:b:c", "no-scheme", "C:\\x", "ht\x00tp:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		scheme, rest, ok := SplitRef(ref)
		switch {
		case ok && scheme+":"+rest != ref:
			t.Fatalf("SplitRef(%q) = %q, %q", ref, scheme, rest)
		case ok && !validScheme(scheme):
			t.Fatalf("SplitRef(%q): bad scheme %q", ref, scheme)
		case !ok && (scheme != "" || rest != ref):
			t.Fatalf("SplitRef(%q) = %q, %q, false", ref, scheme, rest)
		}
	})
}

// FuzzEvaluateRaw: evaluating arbitrary bytes never panics, and whatever is
// decided is consistent (violated rules have findings, nothing is both
// violated and not evaluated). Seeds: testdata/fuzz/FuzzEvaluateRaw.
func FuzzEvaluateRaw(f *testing.F) {
	valid, err := json.Marshal(validCapsule())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{"metadata":{"a":"AKIAIOSFODNN7EXAMPLE","a":1}}`))
	f.Add([]byte(`{"context_refs":["file:../x"],"target":"file:/etc"}`))
	f.Add([]byte(`[1,{"x":[[["password=1"]]]}]`))
	f.Add([]byte(`{"unterminated":`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		res := Evaluate(context.Background(), Input{Raw: raw, Facts: newFacts()})
		violated := map[int]bool{}
		for _, n := range res.Violated {
			violated[n] = true
		}
		for _, n := range res.NotEvaluated {
			if violated[n] {
				t.Fatalf("rule %d both violated and not evaluated", n)
			}
		}
		for _, fd := range res.Findings {
			if !violated[fd.Rule] {
				t.Fatalf("finding for rule %d, which is not violated", fd.Rule)
			}
		}
		if len(res.Violated)+len(res.NotEvaluated) > 0 && res.Passed() {
			t.Fatal("passed with violations or skipped rules")
		}
	})
}
