package rules

import (
	"context"
	"slices"

	"github.com/sagad/sagad/capsule"
)

// touched is a workspace path the capsule may write: its file target or one
// of its lock paths.
type touched struct {
	lock int    // index in constraints.resource_locks_required; -1 for the target
	what string // "target path" or "lock path", for messages
	path string
}

// field is t's field path: "target" or
// "constraints.resource_locks_required[i]". It is rendered for findings
// only; most capsules have none.
func (t touched) field() string {
	if t.lock < 0 {
		return "target"
	}
	return index("constraints.resource_locks_required", t.lock)
}

// touchedPaths calls f with the file target's path (non-file targets touch
// no workspace path) and every lock path.
func touchedPaths(c *capsule.Capsule, f func(touched)) {
	if p, ok := FilePath(c.Target); ok {
		f(touched{-1, "target path", p})
	}
	for i, l := range c.Constraints.ResourceLocksRequired {
		f(touched{i, "lock path", l})
	}
}

// Rule 5: with allowed_paths declared, every touched path lies inside one.
func checkScope(_ context.Context, in Input) ([]capsule.Finding, error) {
	allowed := in.Capsule.Constraints.AllowedPaths
	if len(allowed) == 0 {
		return nil, nil
	}
	var fs []capsule.Finding
	touchedPaths(in.Capsule, func(t touched) {
		if !slices.ContainsFunc(allowed, func(a string) bool { return Within(a, t.path) }) {
			fs = append(fs, finding(t.field(), "%s %q lies outside constraints.allowed_paths", t.what, t.path))
		}
	})
	return fs, nil
}

// Rule 6: no touched path lies inside a forbidden path or the global deny
// list. Matching ignores case: denying too much is the safe error.
func checkForbidden(_ context.Context, in Input) ([]capsule.Finding, error) {
	forbidden := in.Capsule.Constraints.ForbiddenPaths
	var fs []capsule.Finding
	touchedPaths(in.Capsule, func(t touched) {
		if i := withinFoldIndex(forbidden, t.path); i >= 0 {
			fs = append(fs, finding(t.field(), "%s %q lies inside forbidden path %q (constraints.forbidden_paths[%d])",
				t.what, t.path, forbidden[i], i))
			return
		}
		if i := withinFoldIndex(in.Config.DenyPaths, t.path); i >= 0 {
			fs = append(fs, finding(t.field(), "%s %q lies inside %q of the global deny list",
				t.what, t.path, in.Config.DenyPaths[i]))
		}
	})
	return fs, nil
}

// Rule 7: every ref and path is a safe relative path (see CheckPath).
func checkPathSafety(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	var fs []capsule.Finding
	// Field paths are rendered for findings only: most capsules have none.
	report := func(list string, i int, what string, err error) {
		if err == nil {
			return
		}
		field := list
		if i >= 0 {
			field = index(list, i)
		}
		fs = append(fs, finding(field, "%s is unsafe: %v", what, err))
	}
	for i, r := range c.ContextRefs {
		report("context_refs", i, "context ref", CheckRef(r))
	}
	report("target", -1, "target", CheckRef(c.Target))
	lists := [...]struct {
		field, what string
		paths       []string
	}{
		{"constraints.resource_locks_required", "lock path", c.Constraints.ResourceLocksRequired},
		{"constraints.allowed_paths", "allowed path", c.Constraints.AllowedPaths},
		{"constraints.forbidden_paths", "forbidden path", c.Constraints.ForbiddenPaths},
	}
	for _, l := range lists {
		for i, p := range l.paths {
			report(l.field, i, l.what, CheckPath(p))
		}
	}
	return fs, nil
}

// Rule 8: a file target lies inside some declared lock path. Targets of other
// schemes are exempt: there is no workspace path to lock.
func checkLockCoverage(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	p, ok := FilePath(c.Target)
	if !ok {
		return nil, nil
	}
	if !slices.ContainsFunc(c.Constraints.ResourceLocksRequired, func(l string) bool { return Within(l, p) }) {
		return []capsule.Finding{finding("target",
			"target path %q is not covered by any constraints.resource_locks_required entry", p)}, nil
	}
	return nil, nil
}

// Rule 23: context refs and the target use configured schemes.
func checkSchemes(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	var fs []capsule.Finding
	// i is the ref's index in context_refs, -1 for the target: the field
	// path is rendered for findings only.
	check := func(i int, ref string) {
		scheme, _, ok := SplitRef(ref)
		if ok && slices.Contains(in.Config.AllowedSchemes, scheme) {
			return
		}
		field := "target"
		if i >= 0 {
			field = index("context_refs", i)
		}
		if !ok {
			fs = append(fs, finding(field, "ref %q has no scheme (allowed: %v)", ref, in.Config.AllowedSchemes))
			return
		}
		fs = append(fs, finding(field, "ref %q uses scheme %q (allowed: %v)", ref, scheme, in.Config.AllowedSchemes))
	}
	for i, r := range c.ContextRefs {
		check(i, r)
	}
	check(-1, c.Target)
	return fs, nil
}
