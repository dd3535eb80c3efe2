package executors

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/capsule"
)

// A model endpoint (type "openai" or "anthropic") is an executor or a
// reviewer that is one call to a model API: the prompt rendered from the
// capsule (prompt.go), the system prompt file's text as the system message,
// the response's text as the artifact, or for a reviewer a structured
// verdict. The SDKs never retry (max retries 0): sagad's failure policy
// does, so that every attempt is recorded, charged and bounded like any
// other agent's, and a rate limit's Retry-After is waited out by handing the
// phase's message back instead of sleeping in a worker.

// Model endpoint defaults and bounds.
const (
	// DefaultModelTimeout bounds one model call when the endpoint sets no
	// timeout.
	DefaultModelTimeout = 5 * time.Minute
	// DefaultModelMaxTokens is the completion's max_tokens when the
	// endpoint sets none (Anthropic requires one).
	DefaultModelMaxTokens = 4096
	// MaxRetryAfter bounds the wait a Retry-After may ask for: a longer
	// one is cut to it (the capsule's deadline still binds).
	MaxRetryAfter = 10 * time.Minute
	// DefaultRateLimitDelay is the wait after a 429 or 529 without
	// Retry-After, and DefaultServerErrorDelay after a 5xx without it.
	DefaultRateLimitDelay   = 5 * time.Second
	DefaultServerErrorDelay = 1 * time.Second
	// DefaultOpenAIBaseURL and DefaultAnthropicBaseURL are the APIs'
	// addresses when base_url is not set. Set explicitly, so that
	// OPENAI_BASE_URL or ANTHROPIC_BASE_URL in sagad's environment never
	// redirect a call (with its key) elsewhere.
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1/"
	DefaultAnthropicBaseURL = "https://api.anthropic.com/"
	// maxModelReply bounds the response text kept as an artifact.
	maxModelReply = 4 << 20
)

// ModelOptions are a model endpoint's options (README "Model endpoints",
// docs/MODELS.md).
type ModelOptions struct {
	// BaseURL is the API's address; any OpenAI-compatible server for type
	// openai (vLLM, Ollama, llama.cpp, LM Studio).
	BaseURL string `json:"base_url,omitempty"`
	// Model is a tier of "models".tiers or a model id; a capsule's
	// task.model replaces it.
	Model string `json:"model,omitempty"`
	// APIKeyEnv names the environment variable holding the API key.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// APIKeyFile is a file holding the key (its surrounding whitespace
	// trimmed), instead of APIKeyEnv.
	APIKeyFile string `json:"api_key_file,omitempty"`
	// SystemPromptFile is a file whose text goes as the system message.
	SystemPromptFile string `json:"system_prompt_file,omitempty"`
	// MaxTokens bounds the completion. Defaults to DefaultModelMaxTokens.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// Temperature is the sampling temperature (type openai only); the
	// API's default when unset.
	Temperature *float64 `json:"temperature,omitempty"`
	// PromptTemplate is a Go text/template file replacing the shipped
	// prompt (executors/templates).
	PromptTemplate string `json:"prompt_template,omitempty"`
	// Headers are extra HTTP headers, e.g. for a proxy.
	Headers map[string]string `json:"headers,omitzero"`
	// Stream asks for a streamed response, whose progress sagactl status
	// and the console show while it runs.
	Stream bool `json:"stream,omitempty"`
}

// set names the options that are set, for the check that other endpoint
// types leave them alone.
func (o ModelOptions) set() []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"base_url", o.BaseURL != ""}, {"model", o.Model != ""}, {"api_key_env", o.APIKeyEnv != ""},
		{"api_key_file", o.APIKeyFile != ""}, {"system_prompt_file", o.SystemPromptFile != ""},
		{"max_tokens", o.MaxTokens != 0}, {"temperature", o.Temperature != nil},
		{"prompt_template", o.PromptTemplate != ""}, {"headers", len(o.Headers) > 0}, {"stream", o.Stream},
	} {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

// check validates the options of a model endpoint of type typ; at
// prefixes every error. The files are read and the key looked up, so that
// a missing one stops sagad at start rather than a capsule at its call.
func (o ModelOptions) check(at, typ string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", at, field, fmt.Sprintf(format, args...)))
	}
	if strings.TrimSpace(o.Model) == "" {
		bad("model", "required for type %q: a tier of models.tiers or a model id", typ)
	}
	if o.BaseURL != "" && !strings.HasPrefix(o.BaseURL, "http://") && !strings.HasPrefix(o.BaseURL, "https://") {
		bad("base_url", "%q is not an http:// or https:// URL", o.BaseURL)
	}
	if o.APIKeyEnv != "" && o.APIKeyFile != "" {
		bad("api_key_file", "set api_key_env or api_key_file, not both")
	}
	if _, err := o.apiKey(); err != nil {
		errs = append(errs, fmt.Errorf("%s.%w", at, err))
	}
	if o.MaxTokens < 0 {
		bad("max_tokens", "%d must not be negative", o.MaxTokens)
	}
	switch t := o.Temperature; {
	case t == nil:
	case typ == EndpointAnthropic:
		// The SDK (v2) has no temperature: Anthropic deprecated it.
		bad("temperature", "not supported by type %q", typ)
	case *t < 0 || *t > 2 || math.IsNaN(*t):
		bad("temperature", "%v: want 0 to 2", *t)
	}
	if o.SystemPromptFile != "" {
		if _, err := os.ReadFile(o.SystemPromptFile); err != nil {
			bad("system_prompt_file", "%v", err)
		}
	}
	for k, v := range o.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") || strings.ContainsAny(v, "\r\n") {
			bad("headers", "%q is not a valid header", k)
		}
	}
	return errors.Join(errs...)
}

// apiKey reads the key; "" when the endpoint names none (a local server).
// Errors name the variable or file, never a value.
func (o ModelOptions) apiKey() (string, error) {
	switch {
	case o.APIKeyEnv != "":
		k := strings.TrimSpace(os.Getenv(o.APIKeyEnv))
		if k == "" {
			return "", fmt.Errorf("api_key_env: the variable %s is not set or empty", o.APIKeyEnv)
		}
		return k, nil
	case o.APIKeyFile != "":
		b, err := os.ReadFile(o.APIKeyFile)
		if err != nil {
			return "", fmt.Errorf("api_key_file: %s cannot be read: %v", o.APIKeyFile, errors.Unwrap(err))
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return "", fmt.Errorf("api_key_file: %s is empty", o.APIKeyFile)
		}
		return k, nil
	}
	return "", nil
}

// keyName names where the key comes from, for errors: "$OPENAI_API_KEY",
// "the file /etc/…", or "no key".
func (o ModelOptions) keyName() string {
	switch {
	case o.APIKeyEnv != "":
		return "$" + o.APIKeyEnv
	case o.APIKeyFile != "":
		return "the key file " + o.APIKeyFile
	}
	return "no key (neither api_key_env nor api_key_file is set)"
}

// checkModel validates a model endpoint's model against the configured
// models: a name ending in "-tier" must be one of the tiers.
func (ep Endpoint) checkModel(at string, m Models) error {
	if ep.Type != EndpointOpenAI && ep.Type != EndpointAnthropic {
		return nil
	}
	if _, ok := m.Tiers[ep.Model]; !ok && strings.HasSuffix(ep.Model, tierSuffix) {
		return fmt.Errorf("%s.model: %q is not a tier of models.tiers", at, ep.Model)
	}
	return nil
}

// modelClient is one API's call: openai.go and anthropic.go.
type modelClient interface {
	call(ctx context.Context, c modelCall) (modelReply, error)
}

// modelCall is what one call sends.
type modelCall struct {
	model, system, prompt string
	maxTokens             int64
	temperature           *float64
	// verdict asks for a reviewer's structured verdict (a tool call or a
	// JSON schema response).
	verdict bool
	stream  bool
	// progress is told the streamed text so far (stream only).
	progress func(text string, chunks int)
}

// modelReply is what one call got back.
type modelReply struct {
	text string
	// verdict is the structured verdict's JSON (a tool call's arguments or
	// the JSON-schema answer); nil when the model gave none.
	verdict []byte
	// model is the model that answered, as the API says.
	model string
	usage TokenUsage
}

// modelEndpoint is a model endpoint ready to call.
type modelEndpoint struct {
	name, provider string
	// model is the endpoint's model id (its tier resolved).
	model    string
	models   Models
	system   string
	template *template.Template
	opts     ModelOptions
	timeout  time.Duration
	client   modelClient
}

// modelEndpoint builds the endpoint of key for calls of kind, with the
// parsed settings s.
func (ep Endpoint) modelEndpoint(key string, s settings, models Models, kind CallKind) (*modelEndpoint, error) {
	m := &modelEndpoint{name: key, provider: ep.Type, model: models.Resolve(ep.Model), models: models, opts: ep.ModelOptions, timeout: s.timeout}
	if m.timeout <= 0 {
		m.timeout = DefaultModelTimeout
	}
	if ep.SystemPromptFile != "" {
		b, err := os.ReadFile(ep.SystemPromptFile)
		if err != nil {
			return nil, fmt.Errorf("system_prompt_file: %w", err)
		}
		m.system = string(b)
	}
	if ep.PromptTemplate != "" {
		t, err := LoadPromptTemplate(ep.PromptTemplate, kind)
		if err != nil {
			return nil, fmt.Errorf("prompt_template: %w", err)
		}
		m.template = t
	}
	key2, err := ep.apiKey()
	if err != nil {
		return nil, err
	}
	httpc := &http.Client{Timeout: m.timeout}
	switch ep.Type {
	case EndpointOpenAI:
		m.client = newOpenAIClient(ep.ModelOptions, key2, httpc)
	default:
		m.client = newAnthropicClient(ep.ModelOptions, key2, httpc)
	}
	return m, nil
}

// modelFor is the model id an executor's call for c uses: its task.model
// (a tier resolved) when set, else the endpoint's.
func (m *modelEndpoint) modelFor(c *capsule.Capsule) string {
	if c != nil && c.Task.Model != "" {
		return m.models.Resolve(c.Task.Model)
	}
	return m.model
}

// do makes one call and turns its usage into the capsule's (tokens from the
// API, dollars from the price table) and an API error into a
// [*FailedError] the failure policy judges.
func (m *modelEndpoint) do(ctx context.Context, c modelCall) (modelReply, capsule.Usage, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	c.system = m.system
	c.maxTokens = m.opts.MaxTokens
	if c.maxTokens == 0 {
		c.maxTokens = DefaultModelMaxTokens
	}
	c.temperature, c.stream = m.opts.Temperature, m.opts.Stream
	if c.stream {
		c.progress = m.observe(ctx, c.model)
	}
	reply, err := m.client.call(ctx, c)
	if c.progress != nil {
		c.progress("", -1)
	}
	priced := reply.model
	if _, ok := m.models.Prices[priced]; !ok {
		// The price table names what was asked for; an API may answer
		// with a dated snapshot of it.
		priced = c.model
	}
	dollars, _ := m.models.Cost(priced, reply.usage)
	usage := capsule.Usage{Tokens: reply.usage.Tokens(), Dollars: dollars}
	setGenAIAttributes(ctx, m.provider, c.model, reply)
	if err != nil {
		return reply, usage, m.failure(ctx, err, usage)
	}
	return reply, usage, nil
}

// observe returns the progress callback of a streamed call: it reports to
// the context's [CallObserver] at most every 250ms, and with Done when
// called with chunks < 0.
func (m *modelEndpoint) observe(ctx context.Context, model string) func(string, int) {
	o := ObserverFrom(ctx)
	p := CallProgress{Agent: model, Started: time.Now()}
	var last time.Time
	return func(text string, chunks int) {
		if chunks < 0 {
			p.Done = true
			o.Progress(p)
			return
		}
		p.Chunks, p.Bytes, p.LastChunk = chunks, int64(len(text)), time.Now()
		if p.LastChunk.Sub(last) < 250*time.Millisecond {
			return
		}
		last = p.LastChunk
		p.Text = lastBytes(text, MaxProgressText)
		o.Progress(p)
	}
}

// lastBytes is the end of s, at most n bytes, cut at a rune start.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// setGenAIAttributes puts the call's OpenTelemetry gen_ai.* attributes on
// the agent-call span in ctx (traced.go starts it).
func setGenAIAttributes(ctx context.Context, provider, model string, r modelReply) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.system", provider),
		attribute.String("gen_ai.request.model", model),
		attribute.Int64("gen_ai.usage.input_tokens", r.usage.Input),
		attribute.Int64("gen_ai.usage.output_tokens", r.usage.Output),
	}
	if r.model != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", r.model))
	}
	span.SetAttributes(attrs...)
}

// APIError is a model API's error answer as the clients hand it to
// [modelEndpoint.failure]: its status, its own message and the wait its
// Retry-After asked for.
type APIError struct {
	Status     int
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// failure maps a call's error to the failure policy's terms (docs/MODELS.md
// "Errors"):
//
//	429, 529, 5xx, 408    retryable (self_heal), after Retry-After
//	401, 403              halt naming the key's variable (never the API's
//	                      message: some echo part of the key)
//	other 4xx             halt with the API's own message
//	timeout               the failure_retries retry, as a command's
//	transport, malformed  retryable
func (m *modelEndpoint) failure(ctx context.Context, err error, usage capsule.Usage) error {
	f := &FailedError{Usage: usage}
	prefix := m.provider + " " + m.name + ": "
	var api *APIError
	switch {
	case errors.As(err, &api):
		switch s := api.Status; {
		case s == http.StatusUnauthorized || s == http.StatusForbidden:
			f.Detail = fmt.Sprintf("%s%d %s: the API refused the key in %s", prefix, s, http.StatusText(s), m.opts.keyName())
		case s == http.StatusTooManyRequests || s == 529:
			f.Detail, f.Retryable, f.RetryAfter = prefix+api.Error(), true, boundedDelay(api.RetryAfter, DefaultRateLimitDelay)
		case s >= 500 || s == http.StatusRequestTimeout:
			f.Detail, f.Retryable, f.RetryAfter = prefix+api.Error(), true, boundedDelay(api.RetryAfter, DefaultServerErrorDelay)
		default:
			f.Detail = prefix + api.Error()
		}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		f.Detail, f.Timeout = prefix+"timed out after "+m.timeout.String(), true
	case ctx.Err() != nil:
		// Interrupted (sagad stopping, the claim lost): not the model's
		// failure; the phase hands the message back.
		return ctx.Err()
	default:
		f.Detail, f.Retryable = prefix+err.Error(), true
	}
	f.Detail = m.redact(f.Detail)
	return f
}

// redact removes the key from s, should an error text ever carry it.
func (m *modelEndpoint) redact(s string) string {
	if k, _ := m.opts.apiKey(); len(k) >= 4 {
		s = strings.ReplaceAll(s, k, "[redacted]")
	}
	return s
}

// boundedDelay is d within (0, MaxRetryAfter], def when d is 0.
func boundedDelay(d, def time.Duration) time.Duration {
	switch {
	case d <= 0:
		return def
	case d > MaxRetryAfter:
		return MaxRetryAfter
	}
	return d
}

// ParseRetryAfter reads a response's retry-after-ms or Retry-After header
// (seconds or an HTTP date, relative to now); 0 when neither is usable.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 && ms < 1e9 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || s > 1e6 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// ModelExecutor is an executor of type openai or anthropic: the completion's
// text is the artifact (text/markdown).
type ModelExecutor struct{ m *modelEndpoint }

// Execute renders the prompt and makes the call.
func (x ModelExecutor) Execute(ctx context.Context, req Request) (Result, error) {
	prompt, err := RenderExecutePrompt(x.m.template, req)
	if err != nil {
		return Result{}, &FailedError{Detail: x.m.provider + " " + x.m.name + ": " + err.Error()}
	}
	reply, usage, err := x.m.do(ctx, modelCall{model: x.m.modelFor(req.Capsule), prompt: prompt})
	if err != nil {
		return Result{Usage: usage}, err
	}
	if strings.TrimSpace(reply.text) == "" {
		return Result{Usage: usage}, &FailedError{Detail: x.m.provider + " " + x.m.name + ": the model answered no text", Usage: usage, Retryable: true}
	}
	if len(reply.text) > maxModelReply {
		return Result{Usage: usage}, &FailedError{Detail: fmt.Sprintf("%s %s: the answer is %d bytes, over %d", x.m.provider, x.m.name, len(reply.text), maxModelReply), Usage: usage}
	}
	return Result{Content: TextContent(reply.text), MediaType: TextMediaType, Usage: usage}, nil
}

// ModelReviewer is a reviewer of type openai or anthropic: it asks for a
// structured verdict and falls back to the last JSON object of the text.
type ModelReviewer struct{ m *modelEndpoint }

// Review renders the review prompt, makes the call and reads the verdict.
func (x ModelReviewer) Review(ctx context.Context, req ReviewRequest) (ReviewResult, error) {
	prompt, err := RenderReviewPrompt(x.m.template, req)
	if err != nil {
		return ReviewResult{}, &FailedError{Detail: x.m.provider + " " + x.m.name + ": " + err.Error()}
	}
	// task.model is the executor's: the reviewer keeps its own model.
	reply, usage, err := x.m.do(ctx, modelCall{model: x.m.model, prompt: prompt, verdict: true})
	if err != nil {
		return ReviewResult{Usage: usage}, err
	}
	verdict, findings, err := ReplyVerdict(reply.verdict, reply.text)
	if err != nil {
		// Another call may well answer properly: the self-heal retries
		// it, telling the model what was wrong.
		return ReviewResult{Usage: usage}, &FailedError{Detail: x.m.redact(x.m.provider + " " + x.m.name + ": " + err.Error()), Usage: usage, Retryable: true}
	}
	return ReviewResult{Verdict: verdict, Findings: findings, Usage: usage}, nil
}

// ReplyVerdict reads a model reviewer's verdict: the structured one (a tool
// call's arguments or a JSON-schema answer) when the model gave one, else
// the last JSON object with a "verdict" member in its text. Errors wrap
// [ErrNoVerdict] and say what was wrong.
func ReplyVerdict(structured []byte, text string) (capsule.Verdict, []capsule.Finding, error) {
	if len(structured) > 0 {
		return DecodeVerdict(structured)
	}
	return ParseVerdictText(text)
}

// verdictSchema is the JSON schema of the structured verdict, as a tool's
// parameters or a response format.
func verdictSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"verdict": map[string]any{"type": "string", "enum": []string{"APPROVED", "CHANGES_REQUESTED", "REJECTED"}},
			"findings": map[string]any{"type": "array", "items": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"message":  map[string]any{"type": "string"},
					"field":    map[string]any{"type": "string"},
					"severity": map[string]any{"type": "string"},
				},
				"required":             []string{"message"},
				"additionalProperties": false,
			}},
		},
		"required":             []string{"verdict", "findings"},
		"additionalProperties": false,
	}
}

// verdictTool is the name of the tool a reviewer is made to call.
const verdictTool = "submit_verdict"

// verdictToolDescription tells the model what the tool is for.
const verdictToolDescription = "Submit the review's verdict and findings."
