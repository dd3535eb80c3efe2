// Package rules is sagad's constitution (CONSTITUTION.md) as data plus code:
// one table, [Constitution], lists every rule's number, title, kind and
// parameters, and each absolute rule carries a small [Check], a pure function
// of the capsule, the [Config] and read-only pipeline [Facts].
//
// # Kinds
//
// Five rules are [Structural] (12, 15, 16, 17, 35): the pipeline enforces
// them at the phase named in their EnforcedAt, and here they are rows
// without a Check. Twenty-one are [Absolute] (1–11, 13, 14, 18–25):
// AUTOMATED_GATES calls [Evaluate], which runs all of them and reports every
// violation at once; [Result.Halt] turns the result into the
// "absolute_rules_violated:[N, M, …]" halt reason of PIPELINE §3, and
// [Result.Findings] go into the checkpoint.
//
// # Offline and live evaluation
//
// Three rules need live facts (NeedsFacts): 2 (capsule id already used), 19
// (wave open; its room is reserved after the rules, by AUTOMATED_GATES, and
// a capsule without room waits) and 24 (dependencies done). With
// [Input.Facts] nil, as in `sagactl check`, their static parts still run (a malformed id is a
// Rule 2 violation offline too) and their live parts are reported in
// [Result.NotEvaluated]. A failed fact lookup lands in [Result.Errors] and
// NotEvaluated as well: a rule that could not be decided never counts as
// passed. [Result.Passed] is true only when every rule was decided and none
// was violated.
//
// # Findings
//
// Every finding carries the rule number and title, a field path in the style
// "constraints.allowed_paths[0]" (empty for the capsule as a whole, as for its
// byte size) and a message naming the offending value (quoted with %q, so
// control characters show escaped). Rule 9 is the exception: it names the
// field and the kind of secret, never the secret.
//
// # Paths and refs
//
// Refs are URIs "scheme:rest" ([SplitRef]); a "file:" ref's rest is a
// workspace path ("file:src/a.go", never "file://…"). Lock, allowed and
// forbidden paths are workspace-relative slash paths, "." being the whole
// workspace. [CheckPath] and [CheckRef] decide Rule 7 (no "..", no absolute
// path, no drive letter or backslash, no control or bidi-override
// characters, valid UTF-8); [Within] decides containment by whole segments
// after path.Clean, so "src" contains "src/a.go" but not "srcx". Rules 5, 6
// and 8 apply to the file target's path and to the lock paths; other targets
// touch no workspace path. Rule 6 ignores case ([WithinFold]).
//
// The operator sees the constitution in force with [Version], the table and
// each rule's Params under the daemon's Config.
package rules
