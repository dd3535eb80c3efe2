package executors

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// anthropicClient calls Anthropic's messages API.
type anthropicClient struct {
	c anthropic.Client
}

// newAnthropicClient builds the client from the endpoint's options only
// (WithoutEnvironmentDefaults: no ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL or
// custom headers from sagad's environment).
func newAnthropicClient(o ModelOptions, key string, httpc *http.Client) *anthropicClient {
	base := o.BaseURL
	if base == "" {
		base = DefaultAnthropicBaseURL
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(httpc),
		option.WithBaseURL(base),
		option.WithMaxRetries(0),
		option.WithAPIKey(key),
	}
	for k, v := range o.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	return &anthropicClient{c: anthropic.NewClient(opts...)}
}

func (c *anthropicClient) call(ctx context.Context, mc modelCall) (modelReply, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(mc.model),
		MaxTokens: mc.maxTokens,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(mc.prompt))},
	}
	if mc.system != "" {
		p.System = []anthropic.TextBlockParam{{Text: mc.system}}
	}
	if mc.verdict {
		schema := verdictSchema()
		tool := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
			Properties: schema["properties"], Required: []string{"verdict", "findings"},
		}, verdictTool)
		tool.OfTool.Description = anthropic.String(verdictToolDescription)
		p.Tools = []anthropic.ToolUnionParam{tool}
		p.ToolChoice = anthropic.ToolChoiceParamOfTool(verdictTool)
	}
	var (
		msg *anthropic.Message
		err error
	)
	if mc.stream {
		msg, err = c.stream(ctx, p, mc.progress)
	} else {
		msg, err = c.c.Messages.New(ctx, p)
	}
	var reply modelReply
	if msg != nil {
		reply = anthropicReply(msg, mc.verdict)
	}
	if err != nil {
		return reply, anthropicError(err)
	}
	if len(msg.Content) == 0 {
		return reply, errors.New("malformed answer: no content")
	}
	return reply, nil
}

// stream makes the call streamed and accumulates its events into the
// message.
func (c *anthropicClient) stream(ctx context.Context, p anthropic.MessageNewParams, progress func(string, int)) (*anthropic.Message, error) {
	s := c.c.Messages.NewStreaming(ctx, p)
	defer s.Close()
	var (
		msg    anthropic.Message
		text   strings.Builder
		chunks int
	)
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			return &msg, errors.New("malformed stream: " + err.Error())
		}
		chunks++
		if ev.Type == "content_block_delta" {
			text.WriteString(ev.Delta.Text)
		}
		if progress != nil {
			progress(text.String(), chunks)
		}
	}
	if err := s.Err(); err != nil {
		return &msg, err
	}
	return &msg, nil
}

// anthropicReply reads the text blocks, the verdict tool's input and the
// usage: input tokens are the uncached ones plus the cache's reads and
// writes, as the API counts them apart.
func anthropicReply(m *anthropic.Message, verdict bool) modelReply {
	u := m.Usage
	r := modelReply{model: string(m.Model), usage: TokenUsage{
		Input:      max(u.InputTokens, 0) + max(u.CacheCreationInputTokens, 0) + max(u.CacheReadInputTokens, 0),
		Output:     max(u.OutputTokens, 0),
		CacheRead:  max(u.CacheReadInputTokens, 0),
		CacheWrite: max(u.CacheCreationInputTokens, 0),
	}}
	var text strings.Builder
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			if verdict && b.Name == verdictTool && len(b.Input) > 0 {
				r.verdict = []byte(b.Input)
			}
		}
	}
	r.text = text.String()
	return r
}

// anthropicError turns the SDK's *anthropic.Error into an [APIError]:
// the message of the API's error body and Retry-After.
func anthropicError(err error) error {
	var e *anthropic.Error
	if !errors.As(err, &e) {
		return err
	}
	api := &APIError{Status: e.StatusCode, Message: e.Message}
	if e.Response != nil {
		api.RetryAfter = ParseRetryAfter(e.Response.Header, time.Now())
	}
	return api
}
