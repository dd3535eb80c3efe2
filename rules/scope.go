package rules

import (
	"context"
	"slices"

	"github.com/sagad/sagad/capsule"
)

// touched is a workspace path the capsule may write: its file target or one
// of its lock paths.
type touched struct {
	field string // e.g. "target", "constraints.resource_locks_required[0]"
	what  string // "target path" or "lock path", for messages
	path  string
}

// touchedPaths lists the file target's path (non-file targets touch no
// workspace path) and every lock path.
func touchedPaths(c *capsule.Capsule) []touched {
	var ts []touched
	if p, ok := FilePath(c.Target); ok {
		ts = append(ts, touched{"target", "target path", p})
	}
	for i, l := range c.Constraints.ResourceLocksRequired {
		ts = append(ts, touched{index("constraints.resource_locks_required", i), "lock path", l})
	}
	return ts
}

// Rule 5: with allowed_paths declared, every touched path lies inside one.
func checkScope(_ context.Context, in Input) ([]capsule.Finding, error) {
	allowed := in.Capsule.Constraints.AllowedPaths
	if len(allowed) == 0 {
		return nil, nil
	}
	var fs []capsule.Finding
	for _, t := range touchedPaths(in.Capsule) {
		if !slices.ContainsFunc(allowed, func(a string) bool { return Within(a, t.path) }) {
			fs = append(fs, finding(t.field, "%s %q lies outside constraints.allowed_paths", t.what, t.path))
		}
	}
	return fs, nil
}

// Rule 6: no touched path lies inside a forbidden path or the global deny
// list. Matching ignores case: denying too much is the safe error.
func checkForbidden(_ context.Context, in Input) ([]capsule.Finding, error) {
	forbidden := in.Capsule.Constraints.ForbiddenPaths
	var fs []capsule.Finding
	for _, t := range touchedPaths(in.Capsule) {
		if i := slices.IndexFunc(forbidden, func(f string) bool { return WithinFold(f, t.path) }); i >= 0 {
			fs = append(fs, finding(t.field, "%s %q lies inside forbidden path %q (constraints.forbidden_paths[%d])",
				t.what, t.path, forbidden[i], i))
			continue
		}
		if i := slices.IndexFunc(in.Config.DenyPaths, func(f string) bool { return WithinFold(f, t.path) }); i >= 0 {
			fs = append(fs, finding(t.field, "%s %q lies inside %q of the global deny list",
				t.what, t.path, in.Config.DenyPaths[i]))
		}
	}
	return fs, nil
}

// Rule 7: every ref and path is a safe relative path (see CheckPath).
func checkPathSafety(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	var fs []capsule.Finding
	report := func(field, what string, err error) {
		if err != nil {
			fs = append(fs, finding(field, "%s is unsafe: %v", what, err))
		}
	}
	for i, r := range c.ContextRefs {
		report(index("context_refs", i), "context ref", CheckRef(r))
	}
	report("target", "target", CheckRef(c.Target))
	lists := []struct {
		field, what string
		paths       []string
	}{
		{"constraints.resource_locks_required", "lock path", c.Constraints.ResourceLocksRequired},
		{"constraints.allowed_paths", "allowed path", c.Constraints.AllowedPaths},
		{"constraints.forbidden_paths", "forbidden path", c.Constraints.ForbiddenPaths},
	}
	for _, l := range lists {
		for i, p := range l.paths {
			report(index(l.field, i), l.what, CheckPath(p))
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
	check := func(field, ref string) {
		scheme, _, ok := SplitRef(ref)
		switch {
		case !ok:
			fs = append(fs, finding(field, "ref %q has no scheme (allowed: %v)", ref, in.Config.AllowedSchemes))
		case !slices.Contains(in.Config.AllowedSchemes, scheme):
			fs = append(fs, finding(field, "ref %q uses scheme %q (allowed: %v)", ref, scheme, in.Config.AllowedSchemes))
		}
	}
	for i, r := range c.ContextRefs {
		check(index("context_refs", i), r)
	}
	check("target", c.Target)
	return fs, nil
}
