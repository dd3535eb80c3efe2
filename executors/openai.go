package executors

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// openAIClient calls the chat completions API of OpenAI or of any server
// that speaks it.
type openAIClient struct {
	svc openai.ChatCompletionService
}

// newOpenAIClient builds the client from the endpoint's options only: the
// service is made without openai.NewClient, whose defaults would read
// OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID and more from sagad's
// environment and send them to whatever base_url says.
func newOpenAIClient(o ModelOptions, key string, httpc *http.Client) *openAIClient {
	base := o.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	opts := []option.RequestOption{
		option.WithHTTPClient(httpc),
		option.WithBaseURL(base),
		option.WithMaxRetries(0),
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	for k, v := range o.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	return &openAIClient{svc: openai.NewChatCompletionService(opts...)}
}

func (c *openAIClient) call(ctx context.Context, mc modelCall) (modelReply, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(mc.model)}
	if mc.system != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(mc.system))
	}
	p.Messages = append(p.Messages, openai.UserMessage(mc.prompt))
	p.MaxCompletionTokens = openai.Int(mc.maxTokens)
	if mc.temperature != nil {
		p.Temperature = openai.Float(*mc.temperature)
	}
	if mc.verdict {
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
				Name: "verdict", Description: openai.String(verdictToolDescription), Schema: verdictSchema(), Strict: openai.Bool(false),
			},
		}}
	}
	var (
		cc  *openai.ChatCompletion
		err error
	)
	if mc.stream {
		cc, err = c.stream(ctx, p, mc.progress)
	} else {
		cc, err = c.svc.New(ctx, p)
	}
	if err != nil {
		var reply modelReply
		if cc != nil {
			reply = openAIReply(cc, mc.verdict)
		}
		return reply, openAIError(err)
	}
	reply := openAIReply(cc, mc.verdict)
	if len(cc.Choices) == 0 {
		return reply, errors.New("malformed answer: no choices")
	}
	return reply, nil
}

// stream makes the call streamed, with the usage asked for in the last
// chunk, and accumulates the chunks into a completion.
func (c *openAIClient) stream(ctx context.Context, p openai.ChatCompletionNewParams, progress func(string, int)) (*openai.ChatCompletion, error) {
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.svc.NewStreaming(ctx, p)
	defer s.Close()
	var (
		acc    openai.ChatCompletionAccumulator
		text   strings.Builder
		chunks int
	)
	for s.Next() {
		ch := s.Current()
		if !acc.AddChunk(ch) {
			return &acc.ChatCompletion, errors.New("malformed stream: a chunk does not continue the completion")
		}
		chunks++
		for _, choice := range ch.Choices {
			if choice.Index == 0 {
				text.WriteString(choice.Delta.Content)
			}
		}
		if progress != nil {
			progress(text.String(), chunks)
		}
	}
	if err := s.Err(); err != nil {
		return &acc.ChatCompletion, err
	}
	return &acc.ChatCompletion, nil
}

// openAIReply reads the text, the verdict (a JSON-schema answer is the
// text; a tool call's arguments are taken too, for servers that answer
// with one) and the usage.
func openAIReply(cc *openai.ChatCompletion, verdict bool) modelReply {
	r := modelReply{model: cc.Model, usage: TokenUsage{
		Input:     max(cc.Usage.PromptTokens, 0),
		Output:    max(cc.Usage.CompletionTokens, 0),
		CacheRead: max(cc.Usage.PromptTokensDetails.CachedTokens, 0),
	}}
	if len(cc.Choices) == 0 {
		return r
	}
	msg := cc.Choices[0].Message
	r.text = msg.Content
	if !verdict {
		return r
	}
	for _, tc := range msg.ToolCalls {
		if tc.Function.Name == verdictTool && tc.Function.Arguments != "" {
			r.verdict = []byte(tc.Function.Arguments)
		}
	}
	return r
}

// openAIError turns the SDK's *openai.Error into an [APIError] carrying
// the API's message and Retry-After; other errors pass as they are.
func openAIError(err error) error {
	var e *openai.Error
	if !errors.As(err, &e) {
		return err
	}
	api := &APIError{Status: e.StatusCode, Message: e.Message}
	if e.Response != nil {
		api.RetryAfter = ParseRetryAfter(e.Response.Header, time.Now())
	}
	return api
}
