package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Config holds the parameters of the absolute rules. The zero value is the
// default constitution: call [Config.WithDefaults] (Evaluate does) and then
// [Config.Validate] once at start-up.
//
// A nil slice means "use the default"; a non-nil empty slice means "none"
// where that makes sense (DenyPaths, DestructiveKinds, AgentRegistry,
// AllowedHosts).
//
// Config reads and writes JSON (sagad's config file, "constitution") with
// the member names of [Config.MarshalJSON]; ExecutorKinds, ReviewerIDs and
// DefaultReviewer are not among them: they follow from the executors and
// reviewers sagad is configured with.
type Config struct {
	// SupportedMajors are the schema_version majors accepted (Rule 1).
	// Defaults to [1].
	SupportedMajors []int

	// AgentRegistry lists the known producer agent ids (Rule 3). When empty,
	// any well-formed id is accepted. Defaults to empty (no registry).
	AgentRegistry []string

	// DenyPaths is the global deny list no target or lock may lie inside
	// (Rule 6), matched by whole path segments, ignoring case. Defaults to
	// [".git", ".env", "secrets"].
	DenyPaths []string

	// MaxCapsuleBytes bounds the capsule's size as received (Rule 10).
	// Defaults to 131072 (128 KiB).
	MaxCapsuleBytes int

	// MaxContextRefs bounds len(context_refs) (Rule 10). Defaults to 64.
	MaxContextRefs int

	// MaxAcceptanceCriteria bounds len(spec.acceptance_criteria) (Rule 10).
	// Defaults to 64.
	MaxAcceptanceCriteria int

	// MaxLocks bounds len(constraints.resource_locks_required) (Rule 10).
	// Defaults to 32.
	MaxLocks int

	// DestructiveKinds are task kinds that need review.operator_gate whatever
	// constraints.destructive says (Rule 11). Defaults to
	// ["delete", "migrate", "deploy"].
	DestructiveKinds []string

	// Horizon is the longest allowed span from created_at to deadline
	// (Rule 14). Defaults to 7 days.
	Horizon time.Duration

	// MaxTokens is the per-capsule ceiling on budget.tokens (Rule 18).
	// Defaults to 10,000,000.
	MaxTokens int64

	// MaxDollars is the per-capsule ceiling on budget.dollars (Rule 18).
	// Defaults to 1000.
	MaxDollars float64

	// AllowedSchemes are the ref schemes context refs and the target may use
	// (Rule 23), compared exactly. Defaults to ["artifact", "file", "kv"].
	AllowedSchemes []string

	// ExecutorKinds are the task kinds an executor is configured for
	// (Rule 22). Defaults to ["stub"].
	ExecutorKinds []string

	// ReviewerIDs are the reviewer agent ids a reviewer is configured for
	// (Rule 22), so a capsule naming nobody's reviewer halts at
	// AUTOMATED_GATES before its executor spends anything. Defaults to
	// ["stub-reviewer"].
	ReviewerIDs []string

	// DefaultReviewer reviews the capsules that declare no
	// review.reviewer_agent_id (Rules 20 and 22 judge it as if declared; see
	// [Config.Reviewer]). It must be one of ReviewerIDs. Defaults to none:
	// a capsule without a reviewer violates Rule 20.
	DefaultReviewer string

	// AllowedHosts, when not empty, bounds the hosts a capsule may list in
	// constraints.network.allow_hosts (Rule 25): each must equal one of
	// them, ignoring case, or lie under a "*.domain" entry. Defaults to
	// empty (any host the capsule justifies).
	AllowedHosts []string
}

// Reviewer is the reviewer agent id that serves c: its declared
// review.reviewer_agent_id, or DefaultReviewer when it declares none (blank).
// The boolean reports whether the default was used. An empty id means
// nobody (Rule 20).
func (c Config) Reviewer(cp *capsule.Capsule) (id string, byDefault bool) {
	if strings.TrimSpace(cp.Review.ReviewerAgentID) != "" {
		return cp.Review.ReviewerAgentID, false
	}
	if c.DefaultReviewer != "" {
		return c.DefaultReviewer, true
	}
	return "", false
}

// Defaults of [Config].
const (
	defaultMaxCapsuleBytes       = 128 << 10
	defaultMaxContextRefs        = 64
	defaultMaxAcceptanceCriteria = 64
	defaultMaxLocks              = 32
	defaultHorizon               = 7 * 24 * time.Hour
	defaultMaxTokens             = 10_000_000
	defaultMaxDollars            = 1000
)

// Default lists; WithDefaults copies them so callers can never alias them.
var (
	defaultSupportedMajors  = []int{1}
	defaultDenyPaths        = []string{".git", ".env", "secrets"}
	defaultDestructiveKinds = []string{"delete", "migrate", "deploy"}
	defaultAllowedSchemes   = []string{"artifact", "file", "kv"}
	defaultExecutorKinds    = []string{"stub"}
	defaultReviewerIDs      = []string{"stub-reviewer"}
)

// WithDefaults returns a copy of c with every unset field at its default.
// It is idempotent, and the result shares no slice with c or the defaults.
func (c Config) WithDefaults() Config {
	c = c.defaulted()
	c.SupportedMajors = slices.Clone(c.SupportedMajors)
	c.AgentRegistry = slices.Clone(c.AgentRegistry)
	c.DenyPaths = slices.Clone(c.DenyPaths)
	c.DestructiveKinds = slices.Clone(c.DestructiveKinds)
	c.AllowedSchemes = slices.Clone(c.AllowedSchemes)
	c.ExecutorKinds = slices.Clone(c.ExecutorKinds)
	c.ReviewerIDs = slices.Clone(c.ReviewerIDs)
	c.AllowedHosts = slices.Clone(c.AllowedHosts)
	return c
}

// defaulted is [Config.WithDefaults] without the copies: the result shares
// its lists with c and with the defaults. [Evaluate] and [Rule.Run] use it
// for the config they hand the checks, which only read it; the nine copies
// at every evaluation were a quarter of AUTOMATED_GATES' allocations.
func (c Config) defaulted() Config {
	orDefault := func(s, d []string) []string {
		if s == nil {
			return d
		}
		return s
	}
	if c.SupportedMajors == nil {
		c.SupportedMajors = defaultSupportedMajors
	}
	c.DenyPaths = orDefault(c.DenyPaths, defaultDenyPaths)
	c.DestructiveKinds = orDefault(c.DestructiveKinds, defaultDestructiveKinds)
	c.AllowedSchemes = orDefault(c.AllowedSchemes, defaultAllowedSchemes)
	c.ExecutorKinds = orDefault(c.ExecutorKinds, defaultExecutorKinds)
	c.ReviewerIDs = orDefault(c.ReviewerIDs, defaultReviewerIDs)
	if c.MaxCapsuleBytes == 0 {
		c.MaxCapsuleBytes = defaultMaxCapsuleBytes
	}
	if c.MaxContextRefs == 0 {
		c.MaxContextRefs = defaultMaxContextRefs
	}
	if c.MaxAcceptanceCriteria == 0 {
		c.MaxAcceptanceCriteria = defaultMaxAcceptanceCriteria
	}
	if c.MaxLocks == 0 {
		c.MaxLocks = defaultMaxLocks
	}
	if c.Horizon == 0 {
		c.Horizon = defaultHorizon
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = defaultMaxTokens
	}
	if c.MaxDollars == 0 {
		c.MaxDollars = defaultMaxDollars
	}
	return c
}

// ErrInvalidConfig is wrapped by every error [Config.Validate] returns.
var ErrInvalidConfig = errors.New("rules: invalid config")

// agentIDPattern is the producer/reviewer agent id format (Rule 3).
var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$`)

// ValidAgentID reports whether id has the agent id format of Rule 3:
// a letter or digit, then up to 127 letters, digits or "_.:@-".
// It is agentIDPattern written out (Rule 3 asks it of every capsule, and
// the expression was most of the rule's time); TestValidAgentIDAsPattern
// holds the two together.
func ValidAgentID(id string) bool {
	if id == "" || len(id) > 128 || !isAlnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '_' && c != '.' && c != ':' && c != '@' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) }

// Validate reports every problem of c (after defaults) at once, each wrapping
// [ErrInvalidConfig]. Call it on c.WithDefaults(); zero numeric fields of an
// un-defaulted config are reported as out of range.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if len(c.SupportedMajors) == 0 {
		bad("supported_majors: at least one is required")
	}
	for i, m := range c.SupportedMajors {
		if m < 0 {
			bad("supported_majors[%d]: %d is negative", i, m)
		}
	}
	for i, id := range c.AgentRegistry {
		if !ValidAgentID(id) {
			bad("agent_registry[%d]: %q is not a valid agent id", i, id)
		}
	}
	for i, p := range c.DenyPaths {
		if err := CheckPath(p); err != nil {
			bad("deny_paths[%d]: %v", i, err)
		}
	}
	positive := []struct {
		name string
		v    int
	}{
		{"max_capsule_bytes", c.MaxCapsuleBytes},
		{"max_context_refs", c.MaxContextRefs},
		{"max_acceptance_criteria", c.MaxAcceptanceCriteria},
		{"max_locks", c.MaxLocks},
	}
	for _, p := range positive {
		if p.v <= 0 {
			bad("%s: %d must be positive", p.name, p.v)
		}
	}
	// RECEPTION halts capsule_limits_exceeded above these whatever Rule 10
	// says, so a higher Rule 10 limit would be a promise never kept.
	hard := []struct {
		name   string
		v, max int
	}{
		{"max_context_refs", c.MaxContextRefs, capsule.MaxContextRefs},
		{"max_acceptance_criteria", c.MaxAcceptanceCriteria, capsule.MaxAcceptanceCriteria},
		{"max_locks", c.MaxLocks, capsule.MaxResourceLocks},
	}
	for _, h := range hard {
		if h.v > h.max {
			bad("%s: %d is above RECEPTION's hard limit of %d", h.name, h.v, h.max)
		}
	}
	for i, k := range c.DestructiveKinds {
		if strings.TrimSpace(k) == "" {
			bad("destructive_kinds[%d]: blank", i)
		}
	}
	if c.Horizon <= 0 {
		bad("horizon: %s must be positive", c.Horizon)
	}
	if c.MaxTokens <= 0 {
		bad("max_tokens: %d must be positive", c.MaxTokens)
	}
	if !(c.MaxDollars > 0) || math.IsInf(c.MaxDollars, 0) {
		bad("max_dollars: %v must be positive and finite", c.MaxDollars)
	}
	if len(c.AllowedSchemes) == 0 {
		bad("allowed_schemes: at least one is required")
	}
	for i, s := range c.AllowedSchemes {
		if !validScheme(s) {
			bad("allowed_schemes[%d]: %q is not a URI scheme", i, s)
		}
	}
	if len(c.ExecutorKinds) == 0 {
		bad("executor_kinds: at least one is required")
	}
	for i, k := range c.ExecutorKinds {
		if strings.TrimSpace(k) == "" {
			bad("executor_kinds[%d]: blank", i)
		}
	}
	if len(c.ReviewerIDs) == 0 {
		bad("reviewer_ids: at least one is required")
	}
	for i, id := range c.ReviewerIDs {
		if strings.TrimSpace(id) == "" {
			bad("reviewer_ids[%d]: blank", i)
		}
	}
	if c.DefaultReviewer != "" && !slices.Contains(c.ReviewerIDs, c.DefaultReviewer) {
		bad("default_reviewer: %q is not a configured reviewer (%s)", c.DefaultReviewer, strings.Join(c.ReviewerIDs, ", "))
	}
	for i, h := range c.AllowedHosts {
		if !validHostPattern(h) {
			bad("allowed_hosts[%d]: %q is not a host name or *.domain", i, h)
		}
	}
	return errors.Join(errs...)
}

// hostPattern is a DNS name or IP literal, optionally under "*." (Rule 25's
// allowed hosts). Ports and schemes are not part of a host.
var hostPattern = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.:-]{0,252}[A-Za-z0-9])?$`)

func validHostPattern(h string) bool { return hostPattern.MatchString(h) }

// hostAllowed reports whether host matches one of the allowed entries:
// equal ignoring case, or under a "*.domain" entry (a proper subdomain).
func hostAllowed(host string, allowed []string) bool {
	host = strings.ToLower(strings.TrimSpace(host))
	for _, a := range allowed {
		a = strings.ToLower(a)
		if suffix, ok := strings.CutPrefix(a, "*"); ok {
			if len(host) > len(suffix) && strings.HasSuffix(host, suffix) {
				return true
			}
			continue
		}
		if host == a {
			return true
		}
	}
	return false
}

// configJSON is Config's JSON form. Lists have no omitempty: null (or
// absent) is the default, [] is "none", and both survive a round trip.
type configJSON struct {
	SupportedMajors       []int    `json:"supported_majors"`
	AgentRegistry         []string `json:"agent_registry"`
	DenyPaths             []string `json:"deny_paths"`
	MaxCapsuleBytes       int      `json:"max_capsule_bytes,omitempty"`
	MaxContextRefs        int      `json:"max_context_refs,omitempty"`
	MaxAcceptanceCriteria int      `json:"max_acceptance_criteria,omitempty"`
	MaxLocks              int      `json:"max_locks,omitempty"`
	DestructiveKinds      []string `json:"destructive_kinds"`
	Horizon               string   `json:"horizon,omitempty"`
	MaxTokens             int64    `json:"max_tokens,omitempty"`
	MaxDollars            float64  `json:"max_dollars,omitempty"`
	AllowedSchemes        []string `json:"allowed_schemes"`
	AllowedHosts          []string `json:"allowed_hosts"`
}

// MarshalJSON writes c as [Config.UnmarshalJSON] reads it: snake_case
// members, the horizon as a Go duration ("168h0m0s"), zero numbers left out.
func (c Config) MarshalJSON() ([]byte, error) {
	j := configJSON{
		SupportedMajors: c.SupportedMajors, AgentRegistry: c.AgentRegistry, DenyPaths: c.DenyPaths,
		MaxCapsuleBytes: c.MaxCapsuleBytes, MaxContextRefs: c.MaxContextRefs,
		MaxAcceptanceCriteria: c.MaxAcceptanceCriteria, MaxLocks: c.MaxLocks,
		DestructiveKinds: c.DestructiveKinds, MaxTokens: c.MaxTokens, MaxDollars: c.MaxDollars,
		AllowedSchemes: c.AllowedSchemes, AllowedHosts: c.AllowedHosts,
	}
	if c.Horizon != 0 {
		j.Horizon = c.Horizon.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the rule parameters of a JSON object, e.g.
//
//	{"deny_paths": [".git", ".env", "secrets", "infra"], "horizon": "72h", "max_dollars": 50}
//
// Absent members keep their defaults. Unknown members are refused (a
// misspelt parameter would otherwise be silently ignored), as is a horizon
// that is not a Go duration. Values are checked by [Config.Validate].
func (c *Config) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var j configJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("constitution: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("constitution: data after the JSON object")
	}
	var horizon time.Duration
	if j.Horizon != "" {
		d, err := time.ParseDuration(j.Horizon)
		if err != nil {
			return fmt.Errorf("constitution: horizon: %w", err)
		}
		horizon = d
	}
	*c = Config{
		SupportedMajors: j.SupportedMajors, AgentRegistry: j.AgentRegistry, DenyPaths: j.DenyPaths,
		MaxCapsuleBytes: j.MaxCapsuleBytes, MaxContextRefs: j.MaxContextRefs,
		MaxAcceptanceCriteria: j.MaxAcceptanceCriteria, MaxLocks: j.MaxLocks,
		DestructiveKinds: j.DestructiveKinds, Horizon: horizon, MaxTokens: j.MaxTokens, MaxDollars: j.MaxDollars,
		AllowedSchemes: j.AllowedSchemes, AllowedHosts: j.AllowedHosts,
		// Not part of the JSON form: kept from c.
		ExecutorKinds: c.ExecutorKinds, ReviewerIDs: c.ReviewerIDs, DefaultReviewer: c.DefaultReviewer,
	}
	return nil
}
