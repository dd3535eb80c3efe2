package agentproto

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeFrame(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		data       string
		headers    bool
		code, desc string
		want       Frame
		err        bool
	}{
		{name: "terminator", want: Frame{Kind: FrameEnd}},
		{name: "empty with headers", headers: true, err: true},
		{name: "ack", data: `{"type":"status","data":"ack"}`, want: Frame{Kind: FrameChunk, Chunk: Chunk{Type: "status", Status: "ack"}}},
		{name: "text form", data: `{"type":"response","data":"hi"}`, want: Frame{Kind: FrameChunk, Chunk: Chunk{Type: "response", Text: "hi"}}},
		{name: "object form", data: `{"type":"response","data":{"text":"hi","attachments":[{"filename":"a.txt","content":"eA=="}]}}`,
			want: Frame{Kind: FrameChunk, Chunk: Chunk{Type: "response", Text: "hi", Attachments: []Attachment{{Filename: "a.txt", Content: "eA=="}}}}},
		{name: "unknown type", data: `{"type":"thinking","data":{"x":1}}`, want: Frame{Kind: FrameChunk, Chunk: Chunk{Type: "thinking"}}},
		{name: "query", data: `{"type":"query","data":{"id":"q1","reply_subject":"_INBOX.abc","prompt":"which?"}}`,
			want: Frame{Kind: FrameChunk, Chunk: Chunk{Type: "query", Query: &Query{ID: "q1", ReplySubject: "_INBOX.abc", Prompt: "which?"}}}},
		{name: "error frame", headers: true, code: "403", desc: "forbidden\nreally", want: Frame{Kind: FrameError, Code: 403, Description: "forbidden really"}},
		{name: "error code not a number", headers: true, code: "abc", err: true},
		{name: "plain text", data: `hello`, err: true},
		{name: "no type", data: `{"data":"x"}`, err: true},
		{name: "status not a string", data: `{"type":"status","data":3}`, err: true},
		{name: "response number", data: `{"type":"response","data":3}`, err: true},
		{name: "query wildcard reply", data: `{"type":"query","data":{"id":"q","reply_subject":"_INBOX.>","prompt":"?"}}`, err: true},
		{name: "query no id", data: `{"type":"query","data":{"reply_subject":"_INBOX.a","prompt":"?"}}`, err: true},
		{name: "attachment path", data: `{"type":"response","data":{"text":"x","attachments":[{"filename":"../a","content":""}]}}`, err: true},
		{name: "attachment bad base64", data: `{"type":"response","data":{"text":"x","attachments":[{"filename":"a","content":"!!"}]}}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeFrame([]byte(tc.data), tc.headers, tc.code, tc.desc)
			if tc.err {
				require.ErrorIs(t, err, ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseStatusUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Usage
		ok   bool
	}{
		{"ack", Usage{}, false},
		{`cost:{"turn_cost_usd":0.25,"total_cost_usd":1.5}`, Usage{Dollars: 0.25, HasDollars: true}, true},
		{`cost:{"total_cost_usd":1.5}`, Usage{}, false},
		{`cost:{"turn_cost_usd":-1}`, Usage{}, false},
		{`usage:{"input_tokens":10,"output_tokens":5}`, Usage{Tokens: 15, HasTokens: true}, true},
		{`usage:{"output_tokens":5}`, Usage{Tokens: 5, HasTokens: true}, true},
		{`usage:{"input_tokens":-10}`, Usage{}, false},
		{`usage:{}`, Usage{}, false},
		{`usage:nope`, Usage{}, false},
		{`thinking:{"x":1}`, Usage{}, false},
	} {
		got, ok := ParseStatusUsage(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestDecodeInfoAndHeartbeat(t *testing.T) {
	t.Parallel()
	inst, ok, err := DecodeInfo([]byte(`{"name":"agents","id":"ID1","version":"1.0.0","metadata":{"agent":"claude-code","owner":"alice","protocol_version":"0.3"},
		"endpoints":[{"name":"prompt","subject":"agents.prompt.claude-code.alice.main","queue_group":"agents","metadata":{"max_payload":"1MB","attachments_ok":"true"}},
		{"name":"status","subject":"agents.status.claude-code.alice.main"}]}`))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Instance{ID: "ID1", Agent: "claude-code", Owner: "alice", Session: "main", ProtocolVersion: "0.3",
		PromptSubject: "agents.prompt.claude-code.alice.main", MaxPayload: 1 << 20, AttachmentsOK: true}, inst)
	_, ok, err = DecodeInfo([]byte(`{"name":"sagad-admin","id":"x"}`))
	require.NoError(t, err)
	require.False(t, ok)
	_, _, err = DecodeInfo([]byte(`{"name":"agents","id":"x","endpoints":[{"name":"prompt","subject":"agents.>"}]}`))
	require.ErrorIs(t, err, ErrMalformed)

	h, err := DecodeHeartbeat([]byte(`{"agent":"a","owner":"o","session":"s","instance_id":"ID1","ts":"2026-05-01T00:00:00Z","interval_s":30,"extra":1}`))
	require.NoError(t, err)
	require.Equal(t, "ID1", h.InstanceID)
	require.Equal(t, "30s", h.Interval().String())
	_, err = DecodeHeartbeat([]byte(`{"instance_id":"x","interval_s":0}`))
	require.ErrorIs(t, err, ErrMalformed)

	require.True(t, SameVersion("0.3"))
	require.True(t, SameVersion("0.3.7"))
	require.False(t, SameVersion("0.2"))
	require.False(t, SameVersion("1.3"))
	require.False(t, SameVersion(""))
	require.Equal(t, int64(512<<10), ParseSize("512kb"))
	require.Equal(t, int64(0), ParseSize("lots"))
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	_, err := Envelope{Prompt: "  "}.Encode()
	require.Error(t, err)
	b, err := Envelope{Prompt: "p", Attachments: []Attachment{NewAttachment("dir/a.md", []byte("x"))}}.Encode()
	require.NoError(t, err)
	require.JSONEq(t, `{"prompt":"p","attachments":[{"filename":"a.md","content":"eA=="}]}`, string(b))
	s, ok := ParsePromptSubject("agents.prompt.a.o.s")
	require.True(t, ok)
	require.Equal(t, "agents.hb.a.o.s", s.Heartbeat())
	_, ok = ParsePromptSubject("agents.status.a.o.s")
	require.False(t, ok)
	require.False(t, errors.Is(nil, ErrMalformed))
}
