package executors_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

// testKey is the fake APIs' key: no output may ever show it.
const testKey = "sk-test-SECRET-5f1d2c9a77"

// testModels is the models config of the tests.
func testModels() executors.Models {
	cacheRead := 0.3
	return executors.Models{
		Tiers: map[string]string{"low-tier": "gpt-small", "high-tier": "gpt-big", "medium-tier": "claude-mid"},
		Prices: map[string]executors.Price{
			"gpt-small":  {InputPerMTok: 2, OutputPerMTok: 8},
			"gpt-big":    {InputPerMTok: 10, OutputPerMTok: 30},
			"claude-mid": {InputPerMTok: 3, OutputPerMTok: 15, CacheReadPerMTok: &cacheRead},
		},
	}
}

// modelRegistry builds a registry with an executor "llm" and a reviewer
// "llm-reviewer" of the given types against the fakes' URLs.
func modelRegistry(t *testing.T, exec, rev executors.Endpoint) *executors.Registry {
	t.Helper()
	t.Setenv("SAGA_TEST_MODEL_KEY", testKey)
	cfg := executors.Config{
		Executors: map[string]executors.Endpoint{"llm": exec},
		Reviewers: map[string]executors.Endpoint{"llm-reviewer": rev},
		Models:    testModels(),
	}
	require.NoError(t, cfg.Validate())
	r, err := cfg.Build(nil)
	require.NoError(t, err)
	return r
}

func openAIEndpoint(url, model string) executors.Endpoint {
	return executors.Endpoint{Type: executors.EndpointOpenAI, ModelOptions: executors.ModelOptions{
		BaseURL: url + "/v1/", Model: model, APIKeyEnv: "SAGA_TEST_MODEL_KEY",
	}}
}

func anthropicEndpoint(url, model string) executors.Endpoint {
	return executors.Endpoint{Type: executors.EndpointAnthropic, ModelOptions: executors.ModelOptions{
		BaseURL: url, Model: model, APIKeyEnv: "SAGA_TEST_MODEL_KEY",
	}}
}

func modelCapsule(model string) *capsule.Capsule {
	c := &capsule.Capsule{CapsuleID: "5a6a0000-0000-4000-8000-0000000000aa"}
	c.Task = capsule.Task{Kind: "llm", Title: "Write a haiku", Description: "About NATS.", Model: model}
	c.Spec.AcceptanceCriteria = []string{"three lines"}
	return c
}

func TestModelExecutorAnswers(t *testing.T) {
	api := newFakeAPI(t,
		openAIText("gpt-small-2025-01-01", "line one\nline two\nline three", 1000, 500, 400),
		openAIText("gpt-big", "big answer", 100, 10, 0),
	)
	r := modelRegistry(t, openAIEndpoint(api.URL, "low-tier"), anthropicEndpoint(api.URL, "medium-tier"))
	ex, err := r.Executor("llm")
	require.NoError(t, err)

	res, err := ex.Execute(context.Background(), executors.Request{Capsule: modelCapsule(""), Cycle: 1})
	require.NoError(t, err)
	assert.JSONEq(t, `"line one\nline two\nline three"`, string(res.Content))
	assert.Equal(t, executors.TextMediaType, res.MediaType)
	assert.Equal(t, int64(1500), res.Usage.Tokens, "input (cached included) + output")
	// The answer names a dated snapshot: priced as the model asked for.
	// 600 plain input at $2, 400 cached input at $2 (no cache price), 500 output at $8.
	assert.InDelta(t, (1000*2+500*8)/1e6, res.Usage.Dollars, 1e-12)

	res, err = ex.Execute(context.Background(), executors.Request{Capsule: modelCapsule("high-tier"), Cycle: 1})
	require.NoError(t, err)
	assert.InDelta(t, (100*10+10*30)/1e6, res.Usage.Dollars, 1e-12)

	seen := api.requests()
	require.Len(t, seen, 2)
	assert.Equal(t, "/v1/chat/completions", seen[0].Path)
	assert.Equal(t, "Bearer "+testKey, seen[0].Header.Get("Authorization"))
	assert.Equal(t, "gpt-small", seen[0].Body["model"], "the endpoint's tier resolved")
	assert.Equal(t, "gpt-big", seen[1].Body["model"], "task.model's tier resolved")
	msgs, _ := seen[0].Body["messages"].([]any)
	require.NotEmpty(t, msgs)
	assert.Contains(t, msgs[len(msgs)-1].(map[string]any)["content"], "Write a haiku", "the prompt is rendered from the capsule")
}

// TestModelFailures holds every API error to the failure policy's terms:
// retryable with Retry-After, a halt with the API's words, a halt naming
// the key's variable, and never the key.
func TestModelFailures(t *testing.T) {
	tests := []struct {
		name        string
		openai      bool
		reply       fakeReply
		retryable   bool
		timeout     bool
		retryAfter  time.Duration
		contains    string
		notContains string
	}{
		{name: "openai 429 with retry-after", openai: true, reply: openAIError(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-small", map[string]string{"retry-after": "7"}),
			retryable: true, retryAfter: 7 * time.Second, contains: "Rate limit reached"},
		{name: "openai 429 retry-after-ms", openai: true, reply: openAIError(429, "requests", "rate_limit_exceeded", "slow down", map[string]string{"retry-after-ms": "1500"}),
			retryable: true, retryAfter: 1500 * time.Millisecond},
		{name: "openai 429 without retry-after", openai: true, reply: openAIError(429, "requests", "rate_limit_exceeded", "slow down", nil),
			retryable: true, retryAfter: executors.DefaultRateLimitDelay},
		{name: "openai 429 retry-after too long", openai: true, reply: openAIError(429, "requests", "rate_limit_exceeded", "slow down", map[string]string{"retry-after": "86400"}),
			retryable: true, retryAfter: executors.MaxRetryAfter},
		{name: "openai 400 context length", openai: true, reply: openAIError(400, "invalid_request_error", "context_length_exceeded",
			"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", nil),
			contains: "maximum context length is 8192 tokens"},
		{name: "openai 401 names the variable", openai: true, reply: openAIError(401, "invalid_request_error", "invalid_api_key",
			"Incorrect API key provided: sk-test-***********77.", nil),
			contains: "$SAGA_TEST_MODEL_KEY", notContains: "Incorrect API key"},
		{name: "openai 500", openai: true, reply: openAIError(500, "server_error", "", "The server had an error", nil),
			retryable: true, retryAfter: executors.DefaultServerErrorDelay},
		{name: "openai malformed body", openai: true, reply: fakeReply{body: `{"choices": [`}, retryable: true},
		{name: "openai no choices", openai: true, reply: fakeReply{body: `{"id":"x","object":"chat.completion","model":"m","choices":[]}`}, retryable: true, contains: "no choices"},
		{name: "openai empty text", openai: true, reply: openAIText("gpt-small", "  ", 1, 0, 0), retryable: true, contains: "no text"},
		{name: "anthropic 429", reply: anthropicError(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", map[string]string{"retry-after": "3"}),
			retryable: true, retryAfter: 3 * time.Second, contains: "per-minute rate limit"},
		{name: "anthropic 529 overloaded", reply: anthropicError(529, "overloaded_error", "Overloaded", nil),
			retryable: true, retryAfter: executors.DefaultRateLimitDelay},
		{name: "anthropic 400 prompt too long", reply: anthropicError(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum", nil),
			contains: "prompt is too long: 250000 tokens > 200000 maximum"},
		{name: "anthropic 403", reply: anthropicError(403, "permission_error", "Your API key does not have permission", nil),
			contains: "$SAGA_TEST_MODEL_KEY"},
		{name: "anthropic malformed body", reply: fakeReply{body: `<html>bad gateway</html>`}, retryable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.reply)
			ep := anthropicEndpoint(api.URL, "medium-tier")
			if tt.openai {
				ep = openAIEndpoint(api.URL, "low-tier")
			}
			ex, err := modelRegistry(t, ep, ep).Executor("llm")
			require.NoError(t, err)
			_, err = ex.Execute(context.Background(), executors.Request{Capsule: modelCapsule(""), Cycle: 1})
			var f *executors.FailedError
			require.ErrorAs(t, err, &f)
			assert.Equal(t, tt.retryable, f.Retryable, f.Detail)
			assert.Equal(t, tt.timeout, f.Timeout)
			if tt.retryable {
				assert.Equal(t, tt.retryAfter, f.RetryAfter, f.Detail)
			} else {
				assert.Zero(t, f.RetryAfter)
			}
			assert.Contains(t, f.Detail, tt.contains)
			if tt.notContains != "" {
				assert.NotContains(t, f.Detail, tt.notContains)
			}
			assert.NotContains(t, err.Error(), testKey)
			assert.NotContains(t, err.Error(), "5f1d2c9a77")
		})
	}
}

func TestModelTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := newFakeAPI(t)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })
	ep := openAIEndpoint(srv.URL, "low-tier")
	ep.Timeout = "200ms"
	ex, err := modelRegistry(t, ep, ep).Executor("llm")
	require.NoError(t, err)
	_, err = ex.Execute(context.Background(), executors.Request{Capsule: modelCapsule(""), Cycle: 1})
	var f *executors.FailedError
	require.ErrorAs(t, err, &f)
	assert.True(t, f.Timeout, f.Detail)
	assert.Equal(t, executors.ActionRetry, executors.DefaultPolicy.Decide(f, 0), "a timeout is failure_retries' retry")
}

func TestModelReviewerVerdicts(t *testing.T) {
	findings := map[string]any{"verdict": "CHANGES_REQUESTED", "findings": []any{map[string]any{"message": "too long", "field": "artifact", "severity": "major"}}}
	tests := []struct {
		name     string
		openai   bool
		reply    fakeReply
		verdict  capsule.Verdict
		findings int
		tokens   int64
		dollars  float64
		fails    string
	}{
		{name: "anthropic tool call", reply: anthropicVerdict("claude-mid", findings, anthropicUsage(200, 20, 50, 100)),
			verdict: capsule.ChangesRequested, findings: 1, tokens: 370,
			// 200 plain input at $3, 50 cache writes at $3, 100 cache reads at $0.30, 20 output at $15.
			dollars: (200*3 + 50*3 + 100*0.3 + 20*15) / 1e6},
		{name: "anthropic text fallback", reply: anthropicText("claude-mid", "Looks fine.\n```json\n{\"verdict\": \"APPROVED\", \"findings\": []}\n```", anthropicUsage(10, 10, 0, 0)),
			verdict: capsule.Approved, tokens: 20, dollars: (10*3 + 10*15) / 1e6},
		{name: "anthropic no verdict", reply: anthropicText("claude-mid", "I like it.", anthropicUsage(10, 10, 0, 0)), fails: `no JSON object with a "verdict" member`},
		{name: "anthropic bad verdict", reply: anthropicVerdict("claude-mid", map[string]any{"verdict": "MAYBE", "findings": []any{}}, anthropicUsage(1, 1, 0, 0)), fails: `verdict "MAYBE"`},
		{name: "openai json schema answer", openai: true, reply: openAIText("gpt-small", `{"verdict":"REJECTED","findings":[{"message":"wrong topic"}]}`, 10, 5, 0),
			verdict: capsule.Rejected, findings: 1, tokens: 15, dollars: (10*2 + 5*8) / 1e6},
		{name: "openai finding without message", openai: true, reply: openAIText("gpt-small", `{"verdict":"APPROVED","findings":[{"field":"x"}]}`, 1, 1, 0), fails: "message is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.reply)
			ep := anthropicEndpoint(api.URL, "medium-tier")
			if tt.openai {
				ep = openAIEndpoint(api.URL, "low-tier")
			}
			rv, err := modelRegistry(t, ep, ep).Reviewer("llm-reviewer")
			require.NoError(t, err)
			res, err := rv.Review(context.Background(), executors.ReviewRequest{
				Capsule: modelCapsule("high-tier"), Cycle: 1,
				Artifact: capsule.Artifact{Ref: "artifact:x/1", Content: executors.TextContent("a haiku")},
			})
			body := api.requests()[0].Body
			if tt.openai {
				rf, _ := body["response_format"].(map[string]any)
				assert.Equal(t, "json_schema", rf["type"], "the verdict is asked for as a JSON schema")
				assert.Equal(t, "gpt-small", body["model"], "a reviewer keeps its own model whatever task.model says")
			} else {
				tc, _ := body["tool_choice"].(map[string]any)
				assert.Equal(t, "submit_verdict", tc["name"], "the verdict is asked for as a tool call")
				assert.Equal(t, "claude-mid", body["model"])
			}
			if tt.fails != "" {
				var f *executors.FailedError
				require.ErrorAs(t, err, &f)
				assert.Contains(t, f.Detail, tt.fails)
				assert.True(t, f.Retryable, "another call may answer properly")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.verdict, res.Verdict)
			assert.Len(t, res.Findings, tt.findings)
			assert.Equal(t, tt.tokens, res.Usage.Tokens)
			assert.InDelta(t, tt.dollars, res.Usage.Dollars, 1e-12)
		})
	}
}

// progressLog is a CallObserver keeping every report.
type progressLog struct {
	mu  sync.Mutex
	got []executors.CallProgress
}

func (p *progressLog) Progress(c executors.CallProgress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, c)
}
func (p *progressLog) Query(executors.AgentQuery) {}

func TestModelStreams(t *testing.T) {
	for _, openai := range []bool{true, false} {
		t.Run(map[bool]string{true: "openai", false: "anthropic"}[openai], func(t *testing.T) {
			reply := anthropicStream("claude-mid", []string{"Hel", "lo ", "world"}, 30, 7)
			if openai {
				reply = openAIStream("gpt-small", []string{"Hel", "lo ", "world"}, 30, 7)
			}
			api := newFakeAPI(t, reply)
			ep := anthropicEndpoint(api.URL, "medium-tier")
			if openai {
				ep = openAIEndpoint(api.URL, "low-tier")
			}
			ep.Stream = true
			ex, err := modelRegistry(t, ep, ep).Executor("llm")
			require.NoError(t, err)
			obs := &progressLog{}
			res, err := ex.Execute(executors.WithObserver(context.Background(), obs), executors.Request{Capsule: modelCapsule(""), Cycle: 1})
			require.NoError(t, err)
			assert.JSONEq(t, `"Hello world"`, string(res.Content))
			assert.Equal(t, int64(37), res.Usage.Tokens)
			assert.Equal(t, true, api.requests()[0].Body["stream"])
			require.NotEmpty(t, obs.got)
			last := obs.got[len(obs.got)-1]
			assert.True(t, last.Done, "the last report says the call is done")
			assert.Positive(t, last.Chunks)
		})
	}
}

func TestModelsConfig(t *testing.T) {
	m := testModels()
	require.NoError(t, m.Validate())
	for _, ok := range []string{"low-tier", "gpt-small", "claude-mid", "high-tier"} {
		assert.NoError(t, m.Allowed(ok), ok)
	}
	for _, bad := range []string{"ultra-tier", "gpt-unknown", ""} {
		err := m.Allowed(bad)
		assert.ErrorIs(t, err, executors.ErrModelNotAllowed, bad)
	}
	assert.Contains(t, m.Allowed("ultra-tier").Error(), "an unknown tier")
	assert.Equal(t, []string{"llama3"}, m.Unpriced("llama3", "gpt-small"))

	neg := -1.0
	bad := executors.Models{Tiers: map[string]string{"low-tier": "", "x-tier": "low-tier"}, Prices: map[string]executors.Price{"m": {InputPerMTok: -1, CacheReadPerMTok: &neg}}}
	err := bad.Validate()
	require.Error(t, err)
	for _, want := range []string{`models.tiers["low-tier"]: the model id must not be empty`, `"low-tier" is a tier`, `models.prices["m"].input_per_mtok`, `cache_read_per_mtok`} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestModelEndpointConfig(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(testKey+"\n"), 0o600))
	temp := 0.2
	tests := []struct {
		name string
		ep   executors.Endpoint
		want string
	}{
		{"no model", executors.Endpoint{Type: "openai"}, `.model: required for type "openai"`},
		{"unknown tier", executors.Endpoint{Type: "openai", ModelOptions: executors.ModelOptions{Model: "mega-tier"}}, `"mega-tier" is not a tier`},
		{"unset key variable", executors.Endpoint{Type: "anthropic", ModelOptions: executors.ModelOptions{Model: "x", APIKeyEnv: "SAGA_TEST_UNSET_KEY"}}, "SAGA_TEST_UNSET_KEY is not set"},
		{"both key sources", executors.Endpoint{Type: "openai", ModelOptions: executors.ModelOptions{Model: "x", APIKeyEnv: "SAGA_TEST_MODEL_KEY", APIKeyFile: keyFile}}, "not both"},
		{"missing key file", executors.Endpoint{Type: "openai", ModelOptions: executors.ModelOptions{Model: "x", APIKeyFile: filepath.Join(dir, "nope")}}, "cannot be read"},
		{"temperature on anthropic", executors.Endpoint{Type: "anthropic", ModelOptions: executors.ModelOptions{Model: "x", Temperature: &temp}}, "temperature: not supported"},
		{"bad base url", executors.Endpoint{Type: "openai", ModelOptions: executors.ModelOptions{Model: "x", BaseURL: "localhost:8080"}}, "not an http:// or https:// URL"},
		{"model option on nats", executors.Endpoint{Type: "nats", Subject: "a.b", ModelOptions: executors.ModelOptions{Model: "x"}}, `.model: not used by type "nats"`},
		{"key file ok", executors.Endpoint{Type: "openai", ModelOptions: executors.ModelOptions{Model: "low-tier", APIKeyFile: keyFile, Temperature: &temp}}, ""},
	}
	t.Setenv("SAGA_TEST_MODEL_KEY", testKey)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := executors.Config{Executors: map[string]executors.Endpoint{"llm": tt.ep}, Models: testModels()}.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), testKey)
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"2"}}, 2 * time.Second},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
		{http.Header{"Retry-After": {now.Add(30 * time.Second).Format(http.TimeFormat)}}, 30 * time.Second},
		{http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{http.Header{"Retry-After": {"-3"}}, 0},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{nil, 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, executors.ParseRetryAfter(tt.h, now), "%v", tt.h)
	}
}

// FuzzReplyVerdict feeds a model reviewer's answers (structured verdicts
// and free text, both from a model and so untrusted) to the decoder: it
// never panics, and a verdict it accepts is a valid one with capped
// findings that each have a message.
func FuzzReplyVerdict(f *testing.F) {
	f.Add([]byte(`{"verdict":"APPROVED","findings":[]}`), "")
	f.Add([]byte(nil), "text then {\"verdict\": \"CHANGES_REQUESTED\", \"findings\": [{\"message\": \"m\"}]}")
	f.Add([]byte(`{"verdict":1}`), "")
	f.Add([]byte(nil), "```json\n{\"verdict\":\"REJECTED\",\"findings\":[{\"message\":\"x\",\"severity\":\"major\"}]}\n```")
	f.Add([]byte(`[`), "{{{{")
	f.Fuzz(func(t *testing.T, structured []byte, text string) {
		v, fs, err := executors.ReplyVerdict(structured, text)
		if err != nil {
			require.True(t, errors.Is(err, executors.ErrNoVerdict))
			return
		}
		require.True(t, v.Valid())
		require.LessOrEqual(t, len(fs), capsule.MaxFindings)
		for _, f := range fs {
			require.NotEmpty(t, strings.TrimSpace(f.Message))
		}
	})
}

// TestModelSpanAttributes: the agent-call span carries the gen_ai.*
// attributes of the call, and neither span nor events carry the key.
func TestModelSpanAttributes(t *testing.T) {
	api := newFakeAPI(t, anthropicText("claude-mid-20250101", "done", anthropicUsage(40, 9, 0, 10)))
	built := modelRegistry(t, anthropicEndpoint(api.URL, "medium-tier"), anthropicEndpoint(api.URL, "medium-tier"))
	ex, err := built.Executor("llm")
	require.NoError(t, err)
	reg, spans, ctx, phase := tracedRegistry(t)
	reg.RegisterExecutor("llm", ex)
	traced, err := reg.Executor("llm")
	require.NoError(t, err)
	_, err = traced.Execute(ctx, executors.Request{Capsule: modelCapsule(""), Cycle: 1})
	require.NoError(t, err)
	phase.End()

	var call *tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if attrOf(s, "gen_ai.system").AsString() != "" {
			call = &s
		}
	}
	require.NotNil(t, call, "a span with gen_ai attributes")
	assert.Equal(t, "anthropic", attrOf(*call, "gen_ai.system").AsString())
	assert.Equal(t, "claude-mid", attrOf(*call, "gen_ai.request.model").AsString())
	assert.Equal(t, "claude-mid-20250101", attrOf(*call, "gen_ai.response.model").AsString())
	assert.Equal(t, int64(50), attrOf(*call, "gen_ai.usage.input_tokens").AsInt64())
	assert.Equal(t, int64(9), attrOf(*call, "gen_ai.usage.output_tokens").AsInt64())
	for _, kv := range call.Attributes {
		assert.NotContains(t, kv.Value.Emit(), testKey)
	}
}

// FuzzParseRetryAfter: a model API's Retry-After headers (untrusted) never
// panic the parser nor yield a negative wait.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range [][2]string{{"", "2"}, {"1500", ""}, {"", "Wed, 21 Oct 2099 07:28:00 GMT"}, {"-1", "1e308"}, {"NaN", "Inf"}, {"1e999", "0x10"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ms, secs string) {
		h := http.Header{}
		h.Set("Retry-After-Ms", ms)
		h.Set("Retry-After", secs)
		require.GreaterOrEqual(t, executors.ParseRetryAfter(h, time.Now()), time.Duration(0))
	})
}

// TestModelStreamProgressBounded: a streamed answer longer than
// MaxProgressText is reported by its end, cut on a rune boundary.
func TestModelStreamProgressBounded(t *testing.T) {
	long := strings.Repeat("é", executors.MaxProgressText) // two bytes each
	api := newFakeAPI(t, openAIStream("gpt-small", []string{long, "end"}, 1, 1))
	ep := openAIEndpoint(api.URL, "low-tier")
	ep.Stream = true
	ex, err := modelRegistry(t, ep, ep).Executor("llm")
	require.NoError(t, err)
	obs := &progressLog{}
	res, err := ex.Execute(executors.WithObserver(context.Background(), obs), executors.Request{Capsule: modelCapsule(""), Cycle: 1})
	require.NoError(t, err)
	require.JSONEq(t, strconv.Quote(long+"end"), string(res.Content))
	require.NotEmpty(t, obs.got)
	for _, p := range obs.got {
		require.LessOrEqual(t, len(p.Text), executors.MaxProgressText)
		require.True(t, utf8.ValidString(p.Text))
	}
	require.Greater(t, obs.got[0].Bytes, int64(executors.MaxProgressText), "bytes count the whole text")
}
