package executors

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Endpoint types.
const (
	EndpointNATS    = "nats"
	EndpointCommand = "command"
	EndpointStub    = "stub"
	// EndpointAgent is an agent speaking the Agent Protocol for NATS
	// (agent.go).
	EndpointAgent = "agent"
	// EndpointOpenAI and EndpointAnthropic are model endpoints (model.go):
	// the OpenAI chat completions API (any compatible server through
	// base_url) and Anthropic's messages API.
	EndpointOpenAI    = "openai"
	EndpointAnthropic = "anthropic"
)

// MaxRetries bounds Endpoint.Retries, so that a misconfiguration cannot keep a
// capsule retrying for hours.
const MaxRetries = 10

// Config says which executor serves each task.kind and which reviewer each
// review.reviewer_agent_id, as read from sagad's config file:
//
//	"executors": {
//	  "research": {"type": "nats", "subject": "agents.research.execute", "timeout": "2m", "retries": 3, "backoff": "1s"},
//	  "lint":     {"type": "command", "command": ["/usr/local/bin/lint-agent", "--json"], "timeout": "5m"}
//	},
//	"reviewers": {
//	  "reviewer-1": {"type": "nats", "subject": "agents.review.one"}
//	}
//
// The built-in "stub" kind and "stub-reviewer" stay served unless a key
// replaces them.
type Config struct {
	Executors map[string]Endpoint `json:"executors"`
	Reviewers map[string]Endpoint `json:"reviewers"`
	// AgentAccounts says the agent endpoints' hosts log in with the
	// credentials of sagad's generated accounts (agent_accounts.go):
	// discovery, heartbeats and query answers then cross through SAGA's
	// per-role imports. False: sagad and the agents share an account.
	AgentAccounts bool `json:"-"`
	// Models are the model tiers and prices model endpoints and
	// task.model resolve against (model.go).
	Models Models `json:"models"`
}

// Endpoint is one configured executor or reviewer. Durations are Go duration
// strings ("90s", "2m").
type Endpoint struct {
	// Type is "nats", "command", "agent" or "stub".
	Type string `json:"type"`
	// Subject is the NATS subject the worker serves (type nats), or the
	// agent's prompt subject agents.prompt.<agent>.<owner>.<session>
	// (type agent; else Agent names it for discovery).
	Subject string `json:"subject,omitempty"`
	// Agent, Owner and Session pick a live agent instance by discovery
	// (type agent, when Subject is empty): Agent is required, Owner and
	// Session narrow the choice.
	Agent   string `json:"agent,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Session string `json:"session,omitempty"`
	// IdleTimeout is the longest gap between two chunks of an agent's
	// stream (type agent). Defaults to [DefaultAgentIdleTimeout].
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// PromptTemplate is a file holding the Go text/template the prompt is
	// rendered with (type agent). Defaults to the shipped templates
	// ([DefaultExecuteTemplate], [DefaultReviewTemplate]).
	PromptTemplate string `json:"prompt_template,omitempty"`
	// Command is the program and its arguments (type command); no shell is
	// involved.
	Command []string `json:"command,omitempty"`
	// Timeout bounds one NATS attempt or one command run. Defaults to
	// [DefaultNATSTimeout] or [DefaultCommandTimeout].
	Timeout string `json:"timeout,omitempty"`
	// Retries is how often a NATS timeout or "no responders" is retried
	// (type nats), 0 to [MaxRetries]. Defaults to 3.
	Retries *int `json:"retries,omitempty"`
	// Backoff is the first wait between retries, doubling each time (type
	// nats). Defaults to 500ms.
	Backoff string `json:"backoff,omitempty"`
	// MaxBackoff caps the wait between retries (type nats). Defaults to 30s.
	MaxBackoff string `json:"max_backoff,omitempty"`
	// CompletionTimeout is how long the result of an "accepted" call may
	// take before the capsule halts. Defaults to [DefaultCompletionTimeout].
	CompletionTimeout string `json:"completion_timeout,omitempty"`
	// MaxOutput bounds a command's stdout in bytes (type command). Defaults
	// to [DefaultMaxOutput].
	MaxOutput int64 `json:"max_output,omitempty"`
	// Env is extra KEY=VALUE variables for a command (type command).
	Env []string `json:"env,omitempty"`
	// Dir is a command's working directory (type command). Defaults to
	// sagad's.
	Dir string `json:"dir,omitempty"`
	// FailureRetries is how often the failure policy retries a command's
	// exit 1, exit 21 or timeout, 0 to [MaxFailureRetries]; for executors
	// and reviewers alike. Defaults to [DefaultFailureRetries]. Not the
	// same as Retries (NATS transport).
	FailureRetries *int `json:"failure_retries,omitempty"`
	// SelfHeal is how often the failure policy retries a command's exit 12
	// or a NATS reply with retryable: true, 0 to [MaxFailureRetries].
	// Defaults to [DefaultSelfHeal].
	SelfHeal *int `json:"self_heal,omitempty"`
	// ModelOptions are the options of the model endpoints (types openai
	// and anthropic, model.go).
	ModelOptions
}

// Names lists, sorted, the task kinds and reviewer ids a registry built
// from c serves: the configured ones and the built-in stubs, as
// [Registry.Kinds] and [Registry.ReviewerIDs] of [Config.Build]'s registry
// would, without building it.
func (c Config) Names() (kinds, reviewers []string) {
	kinds = append(sortedKeys(c.Executors), StubKind)
	reviewers = append(sortedKeys(c.Reviewers), StubReviewerID)
	slices.Sort(kinds)
	slices.Sort(reviewers)
	return slices.Compact(kinds), slices.Compact(reviewers)
}

// Validate reports every problem of c at once, each naming the offending
// key, e.g. `executors["research"].subject: required for type "nats"`.
func (c Config) Validate() error {
	var errs []error
	for _, role := range []struct {
		name string
		m    map[string]Endpoint
	}{{"executors", c.Executors}, {"reviewers", c.Reviewers}} {
		for _, key := range sortedKeys(role.m) {
			at := fmt.Sprintf("%s[%q]", role.name, key)
			_, err := role.m[key].settings(at, key)
			errs = append(errs, err, role.m[key].checkModel(at, c.Models))
		}
	}
	errs = append(errs, c.Models.Validate())
	return errors.Join(errs...)
}

// Build returns a registry holding the built-in stubs and every configured
// executor and reviewer. nc serves the NATS and agent endpoints; it may be
// nil when there are none. With agent endpoints the registry holds an
// [AgentDirectory], started (heartbeats heard) once Build returns.
func (c Config) Build(nc *nats.Conn) (*Registry, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := NewRegistry()
	r.SetModels(c.Models)
	dir := c.agentDirectory(nc)
	for _, role := range []struct {
		reviewer bool
		m        map[string]Endpoint
	}{{false, c.Executors}, {true, c.Reviewers}} {
		for key, ep := range role.m {
			if err := c.register(r, nc, dir, role.reviewer, key, ep); err != nil {
				return nil, err
			}
		}
	}
	if dir != nil {
		if err := dir.Start(); err != nil {
			return nil, err
		}
		r.agents = dir
	}
	return r, nil
}

// register serves key with ep as an executor or a reviewer.
func (c Config) register(r *Registry, nc *nats.Conn, dir *AgentDirectory, reviewer bool, key string, ep Endpoint) error {
	s, _ := ep.settings("", key)
	at := fmt.Sprintf("executors[%q]", key)
	if reviewer {
		at = fmt.Sprintf("reviewers[%q]", key)
	}
	if (ep.Type == EndpointNATS || ep.Type == EndpointAgent) && nc == nil {
		return fmt.Errorf("%s: type %s needs a NATS connection", at, ep.Type)
	}
	var agent AgentEndpoint
	if ep.Type == EndpointAgent {
		var err error
		if agent, err = c.agentEndpoint(nc, dir, reviewer, key, ep, s); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		r.mu.Lock()
		r.agentEndpoints = append(r.agentEndpoints, agent)
		r.mu.Unlock()
	}
	nats := NATSExecutor{Conn: nc, Subject: ep.Subject, Name: key, Timeout: s.timeout, Retry: s.retry, CompletionTimeout: s.completion}
	if reviewer {
		r.SetReviewerPolicy(key, s.policy)
		switch ep.Type {
		case EndpointNATS:
			r.RegisterReviewer(key, NATSReviewer(nats))
		case EndpointCommand:
			r.RegisterReviewer(key, s.command)
		case EndpointAgent:
			r.RegisterReviewer(key, AgentReviewer{agent})
		case EndpointStub:
			r.RegisterReviewer(key, StubReviewer{})
		case EndpointOpenAI, EndpointAnthropic:
			m, err := ep.modelEndpoint(key, s, c.Models, KindReview)
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			r.RegisterReviewer(key, ModelReviewer{m})
		}
		return nil
	}
	r.SetPolicy(key, s.policy)
	switch ep.Type {
	case EndpointNATS:
		r.RegisterExecutor(key, nats)
	case EndpointCommand:
		r.RegisterExecutor(key, s.command)
	case EndpointAgent:
		r.RegisterExecutor(key, AgentExecutor{agent})
	case EndpointStub:
		r.RegisterExecutor(key, Stub{})
	case EndpointOpenAI, EndpointAnthropic:
		m, err := ep.modelEndpoint(key, s, c.Models, KindExecute)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		r.RegisterExecutor(key, ModelExecutor{m})
	}
	return nil
}

// settings is an endpoint parsed: what Build needs.
type settings struct {
	timeout    time.Duration
	idle       time.Duration
	completion time.Duration
	retry      RetryPolicy
	command    Command
	policy     Policy
}

// settings parses and checks ep; at prefixes every error.
func (ep Endpoint) settings(at, key string) (settings, error) {
	var s settings
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s%s: %s", at, field, fmt.Sprintf(format, args...)))
	}
	duration := func(field, v string) time.Duration {
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad(field, "%q is not a duration like \"30s\"", v)
		case d <= 0:
			bad(field, "%s must be positive", v)
		}
		return d
	}
	if strings.TrimSpace(key) == "" {
		bad("", "the key must not be empty")
	}
	errs = append(errs, ep.checkType(at, bad))
	ep.checkFieldsUsed(bad)
	if err := checkPolicyKnob(ep.FailureRetries); err != nil {
		bad(".failure_retries", "%v", err)
	}
	if err := checkPolicyKnob(ep.SelfHeal); err != nil {
		bad(".self_heal", "%v", err)
	}
	s.policy = DefaultPolicy
	if ep.FailureRetries != nil {
		s.policy.FailureRetries = *ep.FailureRetries
	}
	if ep.SelfHeal != nil {
		s.policy.SelfHeal = *ep.SelfHeal
	}
	if ep.Retries != nil && (*ep.Retries < 0 || *ep.Retries > MaxRetries) {
		bad(".retries", "%d: want 0 to %d", *ep.Retries, MaxRetries)
	}

	s.timeout = duration(".timeout", ep.Timeout)
	s.idle = duration(".idle_timeout", ep.IdleTimeout)
	s.completion = duration(".completion_timeout", ep.CompletionTimeout)
	s.retry.Initial = duration(".backoff", ep.Backoff)
	s.retry.Max = duration(".max_backoff", ep.MaxBackoff)
	if s.retry.Initial > 0 && s.retry.Max > 0 && s.retry.Max < s.retry.Initial {
		bad(".max_backoff", "%s is shorter than backoff %s", ep.MaxBackoff, ep.Backoff)
	}
	if ep.Retries != nil {
		s.retry.Attempts = *ep.Retries + 1
	}
	if ep.Type == EndpointCommand && len(ep.Command) > 0 {
		s.command = Command{
			Path: ep.Command[0], Args: ep.Command[1:], Name: key,
			Timeout: s.timeout, MaxOutput: ep.MaxOutput, Env: ep.Env, Dir: ep.Dir,
			CompletionTimeout: s.completion,
		}
	}
	return s, errors.Join(errs...)
}

// badFunc reports a problem of one field of an endpoint.
type badFunc func(field, format string, args ...any)

// checkType checks the fields ep's type needs; a model endpoint's options
// come back as an error of their own (they name their fields themselves).
func (ep Endpoint) checkType(at string, bad badFunc) (modelErr error) {
	switch ep.Type {
	case EndpointNATS:
		if err := checkSubject(ep.Subject); err != nil {
			bad(".subject", "%v", err)
		}
	case EndpointCommand:
		if len(ep.Command) == 0 || ep.Command[0] == "" {
			bad(".command", "required for type %q: the program and its arguments", ep.Type)
		} else if _, err := exec.LookPath(ep.Command[0]); err != nil {
			bad(".command", "%v", err)
		}
		if ep.MaxOutput < 0 {
			bad(".max_output", "%d must not be negative", ep.MaxOutput)
		}
		for i, kv := range ep.Env {
			k, _, ok := strings.Cut(kv, "=")
			switch {
			case !ok || k == "":
				bad(fmt.Sprintf(".env[%d]", i), "%q is not KEY=VALUE", kv)
			case strings.HasPrefix(k, "SAGA_"):
				bad(fmt.Sprintf(".env[%d]", i), "%s: SAGA_ variables are set by sagad", k)
			}
		}
		if ep.Dir != "" {
			if fi, err := os.Stat(ep.Dir); err != nil || !fi.IsDir() {
				bad(".dir", "%q is not a directory", ep.Dir)
			}
		}
	case EndpointAgent:
		for _, e := range ep.checkAgent() {
			bad(e.field, "%s", e.msg)
		}
	case EndpointStub:
	case EndpointOpenAI, EndpointAnthropic:
		modelErr = ep.ModelOptions.check(at, ep.Type)
	case "":
		bad(".type", "required: %q, %q, %q, %q, %q or %q", EndpointNATS, EndpointCommand, EndpointAgent, EndpointOpenAI, EndpointAnthropic, EndpointStub)
	default:
		bad(".type", "%q: want %q, %q, %q, %q, %q or %q", ep.Type, EndpointNATS, EndpointCommand, EndpointAgent, EndpointOpenAI, EndpointAnthropic, EndpointStub)
	}
	return modelErr
}

// checkFieldsUsed reports each field set on a type that does not use it.
func (ep Endpoint) checkFieldsUsed(bad badFunc) {
	if !slices.Contains([]string{EndpointNATS, EndpointCommand, EndpointAgent, EndpointStub, EndpointOpenAI, EndpointAnthropic}, ep.Type) {
		return // an unknown type is reported once, by checkType
	}
	only := func(field string, set bool, types ...string) {
		if set && !slices.Contains(types, ep.Type) {
			bad(field, "not used by type %q (only by %s)", ep.Type, strings.Join(types, ", "))
		}
	}
	only(".timeout", ep.Timeout != "", EndpointNATS, EndpointCommand, EndpointAgent, EndpointOpenAI, EndpointAnthropic)
	only(".completion_timeout", ep.CompletionTimeout != "", EndpointNATS, EndpointCommand)
	only(".subject", ep.Subject != "", EndpointNATS, EndpointAgent)
	only(".agent", ep.Agent != "", EndpointAgent)
	only(".owner", ep.Owner != "", EndpointAgent)
	only(".session", ep.Session != "", EndpointAgent)
	only(".idle_timeout", ep.IdleTimeout != "", EndpointAgent)
	only(".prompt_template", ep.PromptTemplate != "", EndpointAgent)
	only(".retries", ep.Retries != nil, EndpointNATS)
	only(".backoff", ep.Backoff != "", EndpointNATS)
	only(".max_backoff", ep.MaxBackoff != "", EndpointNATS)
	only(".command", len(ep.Command) > 0, EndpointCommand)
	only(".max_output", ep.MaxOutput != 0, EndpointCommand)
	only(".env", len(ep.Env) > 0, EndpointCommand)
	only(".dir", ep.Dir != "", EndpointCommand)
	for _, f := range ep.ModelOptions.set() {
		only("."+f, true, EndpointOpenAI, EndpointAnthropic)
	}
}

// checkSubject accepts a literal NATS subject: dot-separated non-empty
// tokens without wildcards or whitespace.
func checkSubject(subject string) error {
	if subject == "" {
		return errors.New(`required for type "nats"`)
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("%q is not a literal NATS subject (dot-separated tokens, no wildcards or spaces)", subject)
		}
	}
	return nil
}

func sortedKeys(m map[string]Endpoint) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
