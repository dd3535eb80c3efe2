package executors_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeReply is one scripted answer of a fake model API: a status, headers
// and a body, or SSE events when events is set.
type fakeReply struct {
	status  int
	header  map[string]string
	body    string
	events  []string // each "event-name\x00json" (Anthropic) or "json" (OpenAI)
	openAIs bool
}

// seenRequest is what a fake API received.
type seenRequest struct {
	Path   string
	Header http.Header
	Body   map[string]any
	At     time.Time
}

// fakeAPI is an httptest server on 127.0.0.1 answering its script in order,
// one reply per request; past its end it answers 500 so that a test
// making more calls than scripted fails loudly.
type fakeAPI struct {
	*httptest.Server
	mu     sync.Mutex
	script []fakeReply
	seen   []seenRequest
}

func newFakeAPI(t *testing.T, script ...fakeReply) *fakeAPI {
	t.Helper()
	f := &fakeAPI{script: script}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	f.mu.Lock()
	f.seen = append(f.seen, seenRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()})
	var rep fakeReply
	if len(f.script) == 0 {
		rep = fakeReply{status: 500, body: `{"error":{"message":"fake: script exhausted","type":"server_error"}}`}
	} else {
		rep, f.script = f.script[0], f.script[1:]
	}
	f.mu.Unlock()
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if rep.events != nil {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range rep.events {
			if name, data, ok := strings.Cut(ev, "\x00"); ok {
				fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
			} else {
				fmt.Fprintf(w, "data: %s\n\n", ev)
			}
			w.(http.Flusher).Flush()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.status == 0 {
		rep.status = http.StatusOK
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

// requests returns what the fake received so far.
func (f *fakeAPI) requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.seen...)
}

// remaining is how many scripted replies are left.
func (f *fakeAPI) remaining() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.script)
}

// The shapes below are those the two APIs document.

func openAIText(model, text string, prompt, completion, cached int) fakeReply {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": model,
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop", "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": text, "refusal": nil},
		}},
		"usage": map[string]any{
			"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
			"prompt_tokens_details": map[string]any{"cached_tokens": cached},
		},
	})
	return fakeReply{body: string(b)}
}

func openAIError(status int, typ, code, message string, header map[string]string) fakeReply {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
	return fakeReply{status: status, body: string(b), header: header}
}

func openAIStream(model string, parts []string, prompt, completion int) fakeReply {
	var evs []string
	for _, p := range parts {
		b, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": p}, "finish_reason": nil}},
		})
		evs = append(evs, string(b))
	}
	fin, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}},
	})
	use, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1700000000, "model": model, "choices": []any{},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
	return fakeReply{events: append(evs, string(fin), string(use), "[DONE]")}
}

func anthropicUsage(input, output, cacheWrite, cacheRead int) map[string]any {
	return map[string]any{"input_tokens": input, "output_tokens": output, "cache_creation_input_tokens": cacheWrite, "cache_read_input_tokens": cacheRead}
}

func anthropicMessage(model string, content []any, stop string, usage map[string]any) fakeReply {
	b, _ := json.Marshal(map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": content,
		"stop_reason": stop, "stop_sequence": nil, "usage": usage,
	})
	return fakeReply{body: string(b)}
}

func anthropicText(model, text string, usage map[string]any) fakeReply {
	return anthropicMessage(model, []any{map[string]any{"type": "text", "text": text}}, "end_turn", usage)
}

func anthropicVerdict(model string, verdict map[string]any, usage map[string]any) fakeReply {
	return anthropicMessage(model, []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "submit_verdict", "input": verdict}}, "tool_use", usage)
}

func anthropicError(status int, typ, message string, header map[string]string) fakeReply {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}, "request_id": "req_1"})
	return fakeReply{status: status, body: string(b), header: header}
}

func anthropicStream(model string, parts []string, input, output int) fakeReply {
	ev := func(name string, v any) string {
		b, _ := json.Marshal(v)
		return name + "\x00" + string(b)
	}
	evs := []string{
		ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": "msg_s", "type": "message", "role": "assistant", "model": model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(input, 1, 0, 0)}}),
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}),
	}
	for _, p := range parts {
		evs = append(evs, ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": p}}))
	}
	evs = append(evs,
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}),
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": output}}),
		ev("message_stop", map[string]any{"type": "message_stop"}),
	)
	return fakeReply{events: evs}
}
