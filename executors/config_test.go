package executors_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
)

func intp(n int) *int { return &n }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  executors.Config
		errs []string // each must appear; none means valid
	}{
		{name: "empty"},
		{name: "every type", cfg: executors.Config{
			Executors: map[string]executors.Endpoint{
				"research": {Type: "nats", Subject: "agents.research.execute", Timeout: "2m", Retries: intp(0), Backoff: "1s", MaxBackoff: "10s", CompletionTimeout: "6h"},
				"lint":     {Type: "command", Command: []string{"sh", "-c", "true"}, Timeout: "5m", MaxOutput: 1 << 20, Env: []string{"MODEL=small"}, Dir: "."},
				"stub":     {Type: "stub"},
			},
			Reviewers: map[string]executors.Endpoint{"reviewer-1": {Type: "nats", Subject: "agents.review"}},
		}},
		{name: "missing type", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {}}},
			errs: []string{`executors["x"].type: required: "nats", "command", "agent", "openai", "anthropic" or "stub"`}},
		{name: "unknown type", cfg: executors.Config{Reviewers: map[string]executors.Endpoint{"r": {Type: "grpc", Subject: "a"}}},
			errs: []string{`reviewers["r"].type: "grpc": want "nats", "command", "agent", "openai", "anthropic" or "stub"`}},
		{name: "nats without subject", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "nats"}}},
			errs: []string{`executors["x"].subject: required for type "nats"`}},
		{name: "wildcard subject", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "nats", Subject: "agents.*"}}},
			errs: []string{`executors["x"].subject: "agents.*" is not a literal NATS subject`}},
		{name: "bad durations", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "nats", Subject: "a", Timeout: "soon", Backoff: "-1s", CompletionTimeout: "0s"}}},
			errs: []string{
				`executors["x"].timeout: "soon" is not a duration like "30s"`,
				`executors["x"].backoff: -1s must be positive`,
				`executors["x"].completion_timeout: 0s must be positive`,
			}},
		{name: "max backoff below backoff", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "nats", Subject: "a", Backoff: "5s", MaxBackoff: "1s"}}},
			errs: []string{`executors["x"].max_backoff: 1s is shorter than backoff 5s`}},
		{name: "retries out of range", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "nats", Subject: "a", Retries: intp(11)}}},
			errs: []string{`executors["x"].retries: 11: want 0 to 10`}},
		{name: "fields of another type", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "command", Command: []string{"sh"}, Subject: "a", Retries: intp(1)}}},
			errs: []string{
				`executors["x"].subject: not used by type "command" (only by nats, agent)`,
				`executors["x"].retries: not used by type "command" (only by nats)`,
			}},
		{name: "stub takes no options", cfg: executors.Config{Reviewers: map[string]executors.Endpoint{"r": {Type: "stub", Timeout: "1s"}}},
			errs: []string{`reviewers["r"].timeout: not used by type "stub" (only by nats, command, agent, openai, anthropic)`}},
		{name: "command without program", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "command"}}},
			errs: []string{`executors["x"].command: required for type "command"`}},
		{name: "command not found", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "command", Command: []string{"no-such-agent-program"}}}},
			errs: []string{`executors["x"].command: exec: "no-such-agent-program": executable file not found`}},
		{name: "command env and dir", cfg: executors.Config{Executors: map[string]executors.Endpoint{"x": {Type: "command", Command: []string{"sh"}, Env: []string{"NOVALUE", "=x", "SAGA_CYCLE=9"}, Dir: "/no/such/dir", MaxOutput: -1}}},
			errs: []string{
				`executors["x"].env[0]: "NOVALUE" is not KEY=VALUE`,
				`executors["x"].env[1]: "=x" is not KEY=VALUE`,
				`executors["x"].env[2]: SAGA_CYCLE: SAGA_ variables are set by sagad`,
				`executors["x"].dir: "/no/such/dir" is not a directory`,
				`executors["x"].max_output: -1 must not be negative`,
			}},
		{name: "empty key", cfg: executors.Config{Reviewers: map[string]executors.Endpoint{"": {Type: "stub"}}},
			errs: []string{`reviewers[""]: the key must not be empty`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.errs) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, want := range tt.errs {
				require.Contains(t, err.Error(), want)
			}
			require.Len(t, strings.Split(err.Error(), "\n"), len(tt.errs), "exactly the expected problems: %v", err)
		})
	}
}

func TestConfigFromJSON(t *testing.T) {
	t.Parallel()
	var cfg executors.Config
	require.NoError(t, json.Unmarshal([]byte(`{
		"executors": {"demo": {"type": "nats", "subject": "agents.demo.execute", "timeout": "30s", "retries": 0}},
		"reviewers": {"demo-reviewer": {"type": "command", "command": ["sh", "review.sh"]}}
	}`), &cfg))
	require.NoError(t, cfg.Validate())
	require.Equal(t, 0, *cfg.Executors["demo"].Retries)
	require.Equal(t, []string{"sh", "review.sh"}, cfg.Reviewers["demo-reviewer"].Command)
}

func TestConfigBuild(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.Connect(t, natstest.RunServer(t))
	cfg := executors.Config{
		Executors: map[string]executors.Endpoint{
			"demo": {Type: "nats", Subject: "agents.demo.execute", Timeout: "5s", Retries: intp(0), Backoff: "1s", CompletionTimeout: "2h"},
			"lint": {Type: "command", Command: []string{"sh", "-c", "true"}, Timeout: "1m", Env: []string{"A=b"}},
		},
		Reviewers: map[string]executors.Endpoint{
			"demo-reviewer": {Type: "nats", Subject: "agents.demo.review"},
			"also-stub":     {Type: "stub"},
		},
	}
	reg, err := cfg.Build(nc)
	require.NoError(t, err)
	require.Equal(t, []string{"demo", "lint", "stub"}, reg.Kinds(), "the built-in stub stays")

	ex, err := reg.Executor("demo")
	require.NoError(t, err)
	nx, ok := ex.(executors.NATSExecutor)
	require.True(t, ok, "%T", ex)
	require.Equal(t, "agents.demo.execute", nx.Subject)
	require.Equal(t, "demo", nx.Name)
	require.Equal(t, 1, nx.Retry.Attempts)
	require.Equal(t, "2h0m0s", nx.CompletionTimeout.String())

	ex, err = reg.Executor("lint")
	require.NoError(t, err)
	cx, ok := ex.(executors.Command)
	require.True(t, ok, "%T", ex)
	require.Equal(t, "sh", cx.Path)
	require.Equal(t, []string{"-c", "true"}, cx.Args)
	require.Equal(t, []string{"A=b"}, cx.Env)

	rv, err := reg.Reviewer("demo-reviewer")
	require.NoError(t, err)
	require.IsType(t, executors.NATSReviewer{}, rv)
	rv, err = reg.Reviewer("also-stub")
	require.NoError(t, err)
	require.IsType(t, executors.StubReviewer{}, rv)
	_, err = reg.Reviewer(executors.StubReviewerID)
	require.NoError(t, err)

	_, err = cfg.Build(nil)
	require.ErrorContains(t, err, "needs a NATS connection")
	_, err = executors.Config{Executors: map[string]executors.Endpoint{"x": {}}}.Build(nc)
	require.ErrorContains(t, err, `executors["x"].type`)
}
