package rules

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Reasons a path or ref fails [CheckPath] (Rule 7). A [*PathError] wraps
// exactly one of them, so callers match with errors.Is.
var (
	ErrEmptyPath   = errors.New("empty path")
	ErrInvalidUTF8 = errors.New("invalid UTF-8")
	ErrControlChar = errors.New("control character")
	ErrBackslash   = errors.New("backslash (Windows separator)")
	ErrDriveLetter = errors.New("Windows drive letter")
	ErrAbsolute    = errors.New("absolute path")
	ErrTraversal   = errors.New("'..' traversal")
)

// PathError reports why a path is unsafe. Err is one of the ErrX reasons
// above.
type PathError struct {
	Path string
	Err  error
}

// Error returns `path "p": reason`, quoting the path so control characters
// and invalid bytes are shown escaped.
func (e *PathError) Error() string { return fmt.Sprintf("path %q: %v", e.Path, e.Err) }

// Unwrap returns the reason.
func (e *PathError) Unwrap() error { return e.Err }

// CheckPath reports whether p is a safe workspace-relative slash path: not
// empty, valid UTF-8, free of control characters (bidi overrides included),
// backslashes and Windows drive letters, not absolute, and without any ".."
// segment (even one that path.Clean would resolve, such as "a/../b"). A path
// CheckPath accepts never leaves the workspace after path.Clean. The error is
// a [*PathError].
func CheckPath(p string) error {
	var reason error
	switch {
	case p == "":
		reason = ErrEmptyPath
	case !utf8.ValidString(p):
		reason = ErrInvalidUTF8
	case strings.IndexFunc(p, isControl) >= 0:
		reason = ErrControlChar
	case strings.ContainsRune(p, '\\'):
		reason = ErrBackslash
	case hasDriveLetter(p):
		reason = ErrDriveLetter
	case p[0] == '/':
		reason = ErrAbsolute
	case hasDotDot(p):
		reason = ErrTraversal
	default:
		return nil
	}
	return &PathError{Path: p, Err: reason}
}

// CheckRef applies [CheckPath] to the part of ref after its scheme (the whole
// ref when it has none, see [SplitRef]), so "file:../x", "kv:/abs" and
// "artifact:a\x00" are all unsafe.
func CheckRef(ref string) error {
	if _, rest, ok := SplitRef(ref); ok {
		return CheckPath(rest)
	}
	return CheckPath(ref)
}

// isControl reports C0 and C1 control characters, DEL, and the Unicode
// bidirectional embedding, override and isolate characters, which make a
// path display differently from what it is ("Trojan Source").
func isControl(r rune) bool {
	return unicode.IsControl(r) || '\u202a' <= r && r <= '\u202e' || '\u2066' <= r && r <= '\u2069'
}

// hasDriveLetter reports a leading "C:" style Windows drive.
func hasDriveLetter(p string) bool {
	return len(p) >= 2 && p[1] == ':' && ('a' <= p[0] && p[0] <= 'z' || 'A' <= p[0] && p[0] <= 'Z')
}

// hasDotDot reports whether any '/'-separated segment of p is "..".
func hasDotDot(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}

// SplitRef splits a ref URI "scheme:rest" at its first ':'. ok is false, and
// rest is the whole ref, when there is no ':' or the text before it is not an
// RFC 3986 scheme (a letter, then letters, digits, '+', '-' or '.'). The
// scheme is returned as written; comparisons with configured schemes are
// exact, so "FILE:x" is not a file ref.
func SplitRef(ref string) (scheme, rest string, ok bool) {
	scheme, rest, found := strings.Cut(ref, ":")
	if !found || !validScheme(scheme) {
		return "", ref, false
	}
	return scheme, rest, true
}

func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// FilePath returns the workspace path of a "file:" ref ("file:src/a.go" →
// "src/a.go"). ok is false for any other scheme or a ref without one. The
// path is returned as written; check it with [CheckPath].
func FilePath(ref string) (p string, ok bool) {
	scheme, rest, ok := SplitRef(ref)
	if !ok || scheme != "file" {
		return "", false
	}
	return rest, true
}

// Within reports whether child lies inside parent, comparing whole path
// segments after path.Clean: "src" contains "src", "src/a.go" and "./src/b/"
// but not "srcx" or "src/../x". Parent "." is the whole workspace. An empty
// path, an absolute one or one that climbs out of the workspace after
// cleaning contains nothing and lies in nothing.
func Within(parent, child string) bool { return within(parent, child, false) }

// WithinFold is [Within] with Unicode case folding, for deny lists: on a
// case-insensitive file system ".GIT" is ".git".
func WithinFold(parent, child string) bool { return within(parent, child, true) }

func within(parent, child string, fold bool) bool {
	if parent == "" || child == "" {
		return false
	}
	p, c := path.Clean(parent), path.Clean(child)
	if escapes(p) || escapes(c) {
		return false
	}
	if fold {
		p, c = strings.ToLower(p), strings.ToLower(c)
	}
	return p == "." || c == p || strings.HasPrefix(c, p+"/")
}

// withinFoldIndex returns the index of the first of parents that
// [WithinFold] finds child inside, or -1. The child is cleaned and lowered
// once for all the parents, not once per parent (Rule 6 asks this of every
// touched path against the forbidden paths and the deny list).
func withinFoldIndex(parents []string, child string) int {
	if child == "" || len(parents) == 0 {
		return -1
	}
	c := path.Clean(child)
	if escapes(c) {
		return -1
	}
	c = strings.ToLower(c)
	for i, parent := range parents {
		if parent == "" {
			continue
		}
		p := path.Clean(parent)
		if escapes(p) {
			continue
		}
		p = strings.ToLower(p)
		if p == "." || c == p || strings.HasPrefix(c, p) && len(c) > len(p) && c[len(p)] == '/' {
			return i
		}
	}
	return -1
}

// escapes reports whether a cleaned path is absolute or leaves the workspace.
func escapes(clean string) bool {
	return clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, "/")
}
