package rules

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Version is the version of the constitution this package implements. It
// changes whenever a rule is added, removed or changes meaning. The version
// a sagad enforces folds in its parameters too ([VersionOf]).
const Version = "2026.11.3"

// VersionOf is the version of the constitution in force under cfg:
// [Version], "+", and the first 8 hex digits of the SHA-256 of every rule's
// parameters (defaults applied) — "2026.11.3+1a2b3c4d". Two sagads enforcing
// the same rules with other parameters (a deny path, a cap) say different
// versions, and a checkpoint records the one it was judged under.
func VersionOf(cfg Config) string { return InForce(cfg).Version }

// paramsDigest is the 8 hex digits of [VersionOf]: the SHA-256 of the JSON
// of every rule's number and parameters in rule order (encoding/json sorts
// map keys, so equal parameters give equal digests). Every list parameter
// is a set (paths, kinds, schemes, majors), so lists are sorted first: the
// same set configured in another order is the same constitution.
func paramsDigest(rs []RuleInfo) string {
	type entry struct {
		Number int            `json:"n"`
		Params map[string]any `json:"p"`
	}
	list := make([]entry, len(rs))
	for i, r := range rs {
		p := make(map[string]any, len(r.Params))
		for k, v := range r.Params {
			switch l := v.(type) {
			case []string:
				v = slices.Sorted(slices.Values(l))
			case []int:
				v = slices.Sorted(slices.Values(l))
			}
			p[k] = v
		}
		list[i] = entry{r.Number, p}
	}
	b, err := json.Marshal(list)
	if err != nil {
		// Parameters are strings, numbers and lists of them; should one
		// ever not marshal, its printed form still tells configs apart.
		b = fmt.Appendf(nil, "%v", list)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

// Kind says who enforces a rule.
type Kind string

// Rule kinds.
const (
	// Structural rules are enforced by the pipeline at their phase.
	Structural Kind = "structural"
	// Absolute rules are evaluated on every capsule by AUTOMATED_GATES.
	Absolute Kind = "absolute"
)

// Rule is one row of the constitution table.
type Rule struct {
	// Number is the rule's contract number (halt reasons, metrics, reports).
	Number int
	// Title is the rule's title as written in CONSTITUTION.md.
	Title string
	// Kind is Structural or Absolute.
	Kind Kind
	// EnforcedAt names where a structural rule is enforced, e.g. "REVIEW";
	// empty for absolute rules (they are all enforced at AUTOMATED_GATES).
	EnforcedAt string
	// Params returns the parameters in force under a config, for display
	// (`sagactl rules`). It applies defaults itself. Nil when the rule has
	// none.
	Params func(Config) map[string]any
	// Check evaluates an absolute rule; nil for structural rules.
	Check Check
	// NeedsFacts is true when the rule cannot be fully evaluated without
	// live pipeline [Facts].
	NeedsFacts bool
}

// Check evaluates one absolute rule. It returns the rule's findings (none
// means the rule passes) with Field and Message set; [Rule.Run] and
// [Evaluate] stamp Rule and Title. It returns [ErrNoFacts] when its live part
// was skipped because in.Facts is nil, and any other error when a fact lookup
// failed; either way a nil-findings answer then means "not evaluated", never
// "passed". Checks are pure functions of their input apart from Facts calls.
type Check func(ctx context.Context, in Input) ([]capsule.Finding, error)

// ErrNoFacts is returned by a [Check] whose live part was skipped because
// [Input.Facts] is nil (offline evaluation, e.g. `sagactl check`).
var ErrNoFacts = errors.New("rules: live pipeline facts unavailable")

// ErrNoCapsule is reported for every absolute rule when [Input] has neither a
// capsule nor raw bytes that decode into one.
var ErrNoCapsule = errors.New("rules: no capsule to evaluate")

// Input is everything a check may look at.
type Input struct {
	// Capsule is the decoded capsule. When nil, Evaluate decodes Raw.
	Capsule *capsule.Capsule
	// Raw is the capsule's bytes as received, for size and secret scanning.
	// When nil, the JSON encoding of Capsule stands in for it.
	Raw []byte
	// Config holds the rule parameters; Evaluate applies defaults.
	Config Config
	// Facts answers live questions; nil when evaluating offline.
	Facts Facts
	// Now is the evaluation time. No current rule depends on it (Rule 14 is
	// relative to created_at; RECEPTION owns deadline_in_past), but it is part
	// of the input so a future rule stays a pure function.
	Now time.Time
}

// Facts are read-only pipeline facts some rules need. The pipeline implements
// them on JetStream; tests use fakes. Implementations honour ctx.
type Facts interface {
	// IDConflict reports whether another capsule with this id already exists
	// with a different digest, or has already completed.
	IDConflict(ctx context.Context, id, digest string) (bool, error)
	// Wave reports a wave's state; ok is false when no wave record exists
	// (the wave is open and unlimited).
	Wave(ctx context.Context, waveID string) (w WaveInfo, ok bool, err error)
	// DependencyDone reports whether the capsule id completed HANDOFF.
	DependencyDone(ctx context.Context, id string) (bool, error)
}

// WaveInfo is what Rule 19 needs to know about a wave.
type WaveInfo struct {
	// Closed waves accept no more capsules.
	Closed bool
	// TokensCap is the wave's token budget; 0 means no cap.
	TokensCap int64
	// DollarsCap is the wave's dollar budget; 0 means no cap.
	DollarsCap float64
	// Used is what the wave has consumed or reserved so far.
	Used capsule.Usage
}

// Result is the outcome of evaluating every absolute rule on one capsule.
type Result struct {
	// Violated lists the violated rule numbers, ascending and unique.
	Violated []int
	// Findings holds the findings, sorted by rule, then field (array
	// indices compare numerically): at most [MaxFindingsPerRule] per rule,
	// the last one counting the rest, and at most capsule.MaxFindings in all.
	Findings []capsule.Finding
	// NotEvaluated lists, ascending, the rules that could not be decided:
	// their live part was skipped (Facts == nil) or a fact lookup failed, and
	// they produced no finding. They did not pass.
	NotEvaluated []int
	// Errors holds fact lookup errors by rule number; nil when there are none.
	Errors map[int]error
}

// Halt returns the AUTOMATED_GATES halt reason
// "absolute_rules_violated:[N, M, …]", or the zero reason when no rule is
// violated.
func (r Result) Halt() capsule.HaltReason {
	if len(r.Violated) == 0 {
		return capsule.HaltReason{}
	}
	return capsule.AbsoluteRulesViolated(r.Violated)
}

// Passed reports whether every absolute rule was evaluated and none was
// violated.
func (r Result) Passed() bool { return len(r.Violated) == 0 && len(r.NotEvaluated) == 0 }

// Err joins the fact lookup errors, ascending by rule, each prefixed with
// "rule N: "; nil when there are none. A caller typically retries later on
// Err rather than halting.
func (r Result) Err() error {
	if len(r.Errors) == 0 {
		return nil
	}
	nums := make([]int, 0, len(r.Errors))
	for n := range r.Errors {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	errs := make([]error, 0, len(nums))
	for _, n := range nums {
		errs = append(errs, fmt.Errorf("rule %d: %w", n, r.Errors[n]))
	}
	return errors.Join(errs...)
}

// Constitution is the whole constitution in force, sorted by number: five
// structural rules and twenty-one absolute ones (CONSTITUTION.md).
var Constitution = []Rule{
	{Number: 1, Title: "Supported schema version", Kind: Absolute, Check: checkSchemaVersion,
		Params: params(func(c Config) map[string]any { return map[string]any{"supported_majors": c.SupportedMajors} })},
	{Number: 2, Title: "Well-formed identity", Kind: Absolute, Check: checkIdentity, NeedsFacts: true,
		Params: params(func(Config) map[string]any { return map[string]any{"formats": []string{"uuid", "ulid"}} })},
	{Number: 3, Title: "Known producer", Kind: Absolute, Check: checkProducer,
		Params: params(func(c Config) map[string]any {
			return map[string]any{"agent_id_pattern": agentIDPattern.String(), "agent_registry": nonNil(c.AgentRegistry)}
		})},
	{Number: 4, Title: "Independent spec approval", Kind: Absolute, Check: checkSpecApproval},
	{Number: 5, Title: "Scope containment", Kind: Absolute, Check: checkScope},
	{Number: 6, Title: "Forbidden paths untouched", Kind: Absolute, Check: checkForbidden,
		Params: params(func(c Config) map[string]any { return map[string]any{"deny_paths": c.DenyPaths} })},
	{Number: 7, Title: "Path safety", Kind: Absolute, Check: checkPathSafety},
	{Number: 8, Title: "Write-lock coverage", Kind: Absolute, Check: checkLockCoverage},
	{Number: 9, Title: "No secrets", Kind: Absolute, Check: checkSecrets,
		Params: params(func(Config) map[string]any { return map[string]any{"patterns": secretPatternNames()} })},
	{Number: 10, Title: "Size limits", Kind: Absolute, Check: checkSizes,
		Params: params(func(c Config) map[string]any {
			return map[string]any{
				"max_capsule_bytes":       c.MaxCapsuleBytes,
				"max_context_refs":        c.MaxContextRefs,
				"max_acceptance_criteria": c.MaxAcceptanceCriteria,
				"max_locks":               c.MaxLocks,
			}
		})},
	{Number: 11, Title: "Human gate for destructive work", Kind: Absolute, Check: checkDestructive,
		Params: params(func(c Config) map[string]any { return map[string]any{"destructive_kinds": c.DestructiveKinds} })},
	{Number: 12, Title: "Max review cycles (3)", Kind: Structural, EnforcedAt: "REVIEW → EXECUTION loop",
		Params: params(func(Config) map[string]any { return map[string]any{"max_cycles": capsule.MaxCycles} })},
	{Number: 13, Title: "Testable acceptance", Kind: Absolute, Check: checkAcceptance},
	{Number: 14, Title: "Bounded horizon", Kind: Absolute, Check: checkHorizon,
		Params: params(func(c Config) map[string]any { return map[string]any{"horizon": c.Horizon.String()} })},
	{Number: 15, Title: "Reviewer is never the producer", Kind: Structural, EnforcedAt: "REVIEW"},
	{Number: 16, Title: "Token and dollar budgets, per capsule and per wave", Kind: Structural,
		EnforcedAt: "RECEPTION (positivity), EXECUTION, REVIEW"},
	{Number: 17, Title: "Locks before execution, all or nothing, always released", Kind: Structural,
		EnforcedAt: "RECEPTION (availability), EXECUTION"},
	{Number: 18, Title: "Budget ceiling", Kind: Absolute, Check: checkBudgetCeiling,
		Params: params(func(c Config) map[string]any {
			return map[string]any{"max_tokens": c.MaxTokens, "max_dollars": c.MaxDollars}
		})},
	{Number: 19, Title: "Wave fits", Kind: Absolute, Check: checkWave, NeedsFacts: true},
	{Number: 20, Title: "Reviewer declared and independent", Kind: Absolute, Check: checkReviewer,
		Params: params(func(c Config) map[string]any { return map[string]any{"default_reviewer": c.DefaultReviewer} })},
	{Number: 21, Title: "Cycle limit respected", Kind: Absolute, Check: checkCycleLimit,
		Params: params(func(Config) map[string]any { return map[string]any{"min": 1, "max": capsule.MaxCycles} })},
	{Number: 22, Title: "Executor exists", Kind: Absolute, Check: checkExecutor,
		Params: params(func(c Config) map[string]any {
			return map[string]any{"executor_kinds": c.ExecutorKinds, "reviewer_ids": c.ReviewerIDs}
		})},
	{Number: 23, Title: "Allowed ref schemes", Kind: Absolute, Check: checkSchemes,
		Params: params(func(c Config) map[string]any { return map[string]any{"allowed_schemes": c.AllowedSchemes} })},
	{Number: 24, Title: "Dependencies done", Kind: Absolute, Check: checkDependencies, NeedsFacts: true},
	{Number: 25, Title: "Network declared", Kind: Absolute, Check: checkNetwork,
		Params: params(func(c Config) map[string]any { return map[string]any{"allowed_hosts": nonNil(c.AllowedHosts)} })},
	{Number: 35, Title: "Spec approved before work (definition of ready)", Kind: Structural, EnforcedAt: "PLANNING"},
}

// params wraps a Params function so it always sees a defaulted config.
func params(f func(Config) map[string]any) func(Config) map[string]any {
	return func(c Config) map[string]any { return f(c.WithDefaults()) }
}

// nonNil shows an unset list as [] rather than null: for these lists both
// mean "no restriction".
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Report is the constitution in force under a config and its version: what
// `sagactl rules` prints and sagad's admin service answers on
// saga.admin.rules (schemas/admin/rules-reply.schema.json).
type Report struct {
	Version string     `json:"version"`
	Rules   []RuleInfo `json:"rules"`
}

// RuleInfo is one rule of a [Report].
type RuleInfo struct {
	Number int    `json:"number"`
	Title  string `json:"title"`
	Kind   string `json:"kind"`
	// EnforcedAt names where a structural rule is enforced; empty for
	// absolute rules, which AUTOMATED_GATES evaluates.
	EnforcedAt string `json:"enforced_at"`
	// Params are the rule's parameters under the configuration; {} when it
	// has none.
	Params map[string]any `json:"params"`
}

// InForce lists every rule with its parameters under cfg (defaults
// applied), in rule-number order.
func InForce(cfg Config) Report {
	rep := Report{Version: Version, Rules: make([]RuleInfo, 0, len(Constitution))}
	for _, r := range Constitution {
		info := RuleInfo{Number: r.Number, Title: r.Title, Kind: string(r.Kind), EnforcedAt: r.EnforcedAt, Params: map[string]any{}}
		if r.Params != nil {
			info.Params = r.Params(cfg)
		}
		rep.Rules = append(rep.Rules, info)
	}
	slices.SortFunc(rep.Rules, func(a, b RuleInfo) int { return a.Number - b.Number })
	rep.Version = Version + "+" + paramsDigest(rep.Rules)
	return rep
}

// Lookup returns the rule numbered n.
func Lookup(n int) (Rule, bool) {
	i := slices.IndexFunc(Constitution, func(r Rule) bool { return r.Number == n })
	if i < 0 {
		return Rule{}, false
	}
	return Constitution[i], true
}

// Run evaluates this one rule: it applies config defaults, calls Check and
// stamps each finding with the rule's number and title, sorted by field. A
// structural rule (nil Check) returns nothing. The error has the meaning
// documented on [Check].
func (r Rule) Run(ctx context.Context, in Input) ([]capsule.Finding, error) {
	if r.Check == nil {
		return nil, nil
	}
	in.Config = in.Config.defaulted()
	if in.Capsule == nil {
		c, err := decode(in.Raw)
		if err != nil {
			return nil, err
		}
		in.Capsule = c
	}
	return r.run(ctx, in)
}

// MaxFindingsPerRule bounds one rule's findings: a capsule with ten
// thousand bad entries gets the first few and a count (capsule.CapFindings),
// and one noisy rule cannot crowd the others out of [Result.Findings].
const MaxFindingsPerRule = 10

// run is Run without the input preparation Evaluate does once for all rules.
// Findings are sorted, then capped, so the count comes last.
func (r Rule) run(ctx context.Context, in Input) ([]capsule.Finding, error) {
	fs, err := r.Check(ctx, in)
	sortFindings(fs)
	fs = capsule.CapFindings(fs, MaxFindingsPerRule)
	for i := range fs {
		fs[i].Rule, fs[i].Title = r.Number, r.Title
	}
	return fs, err
}

// decode is the fallback when Input carries only raw bytes.
func decode(raw []byte) (*capsule.Capsule, error) {
	if raw == nil {
		return nil, ErrNoCapsule
	}
	var c capsule.Capsule
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCapsule, err)
	}
	c.Canonicalize()
	return &c, nil
}

// Evaluate runs every absolute rule of [Constitution] on in and gathers the
// result. It applies config defaults but does not validate the config (do
// that once at start-up). Rules run in order, sequentially; fact lookups use
// ctx. A rule whose live part cannot run lands in NotEvaluated, never among
// the passes; a rule with findings is violated even if a lookup also failed.
func Evaluate(ctx context.Context, in Input) Result {
	var res Result
	in.Config = in.Config.defaulted()
	if in.Capsule == nil {
		c, err := decode(in.Raw)
		if err != nil {
			res.Errors = make(map[int]error)
			for _, r := range Constitution {
				if r.Check != nil {
					res.NotEvaluated = append(res.NotEvaluated, r.Number)
					res.Errors[r.Number] = err
				}
			}
			slices.Sort(res.NotEvaluated)
			return res
		}
		in.Capsule = c
	}
	for _, r := range Constitution {
		if r.Check == nil {
			continue
		}
		fs, err := r.run(ctx, in)
		if len(fs) > 0 {
			res.Violated = append(res.Violated, r.Number)
			res.Findings = append(res.Findings, fs...)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrNoFacts) {
			if res.Errors == nil {
				res.Errors = make(map[int]error)
			}
			res.Errors[r.Number] = err
		}
		if len(fs) == 0 {
			res.NotEvaluated = append(res.NotEvaluated, r.Number)
		}
	}
	slices.Sort(res.Violated)
	res.Violated = slices.Compact(res.Violated)
	slices.Sort(res.NotEvaluated)
	res.NotEvaluated = slices.Compact(res.NotEvaluated)
	// Rules ran in ascending order and each sorted its own findings, so
	// res.Findings is already by rule, then field, each rule's count last.
	res.Findings = capsule.CapFindings(res.Findings, capsule.MaxFindings)
	return res
}

// sortFindings orders findings by rule, then field, keeping the emission
// order of findings on the same field.
func sortFindings(fs []capsule.Finding) {
	slices.SortStableFunc(fs, func(a, b capsule.Finding) int {
		if c := cmp.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		return compareFields(a.Field, b.Field)
	})
}

// compareFields compares field paths so that "context_refs[2]" sorts before
// "context_refs[10]": runs of digits compare as numbers, the rest bytewise.
func compareFields(a, b string) int {
	for a != "" && b != "" {
		if isDigit(a[0]) && isDigit(b[0]) {
			na, nb := digitRun(a), digitRun(b)
			da, db := strings.TrimLeft(a[:na], "0"), strings.TrimLeft(b[:nb], "0")
			if c := cmp.Compare(len(da), len(db)); c != 0 {
				return c
			}
			if c := strings.Compare(da, db); c != 0 {
				return c
			}
			a, b = a[na:], b[nb:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitRun(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
}
