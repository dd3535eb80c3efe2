package executors_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

func TestDecodeExecutorReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     executors.ExecutorReply
		err      string
	}{
		{name: "status defaults to ok, media type to JSON", in: `{"content":[1,2]}`,
			want: executors.ExecutorReply{Status: executors.StatusOK, Content: []byte(`[1,2]`), MediaType: "application/json"}},
		{name: "text artifact", in: `{"status":"ok","content":"hello","media_type":"text/plain","usage":{"tokens":3,"dollars":0.25}}`,
			want: executors.ExecutorReply{Status: executors.StatusOK, Content: []byte(`"hello"`), MediaType: "text/plain", Usage: capsule.Usage{Tokens: 3, Dollars: 0.25}}},
		{name: "failed", in: `{"status":"failed","error":"boom"}`,
			want: executors.ExecutorReply{Status: executors.StatusFailed, Error: "boom"}},
		{name: "accepted", in: `{"status":"accepted"}`,
			want: executors.ExecutorReply{Status: executors.StatusAccepted}},
		{name: "empty", in: ` `, err: "malformed reply: empty reply"},
		{name: "not an object", in: `[1]`, err: "malformed reply: json: cannot unmarshal array"},
		{name: "unknown status", in: `{"status":"done","content":1}`, err: `malformed reply: status "done": want ok, accepted or failed`},
		{name: "ok without content", in: `{"status":"ok"}`, err: `malformed reply: status "ok" without content`},
		{name: "null content", in: `{"content":null}`, err: `malformed reply: status "ok" without content`},
		{name: "negative usage", in: `{"content":1,"usage":{"tokens":-1}}`, err: "malformed reply: invalid usage: -1 tokens / 0 dollars: tokens must not be negative"},
		{name: "negative dollars", in: `{"content":1,"usage":{"tokens":1,"dollars":-0.01}}`, err: "malformed reply: invalid usage: 1 tokens / -0.01 dollars: dollars must not be negative"},
		{name: "negative usage of a failure", in: `{"status":"failed","error":"x","usage":{"tokens":-9}}`, err: "malformed reply: invalid usage: -9 tokens"},
		{name: "negative usage of an acceptance", in: `{"status":"accepted","usage":{"dollars":-1}}`, err: "malformed reply: invalid usage: 0 tokens / -1 dollars"},
		{name: "overflowing dollars", in: `{"content":1,"usage":{"dollars":1e999}}`, err: "malformed reply: json: cannot unmarshal number 1e999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := executors.DecodeExecutorReply([]byte(tt.in))
			if tt.err != "" {
				require.ErrorIs(t, err, executors.ErrMalformedReply)
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.Status, got.Status)
			require.Equal(t, string(tt.want.Content), string(got.Content))
			require.Equal(t, tt.want.MediaType, got.MediaType)
			require.Equal(t, tt.want.Usage, got.Usage)
			require.Equal(t, tt.want.Error, got.Error)
		})
	}
}

func TestDecodeReviewerReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     executors.ReviewerReply
		err      string
	}{
		{name: "approved", in: `{"verdict":"APPROVED"}`,
			want: executors.ReviewerReply{Status: executors.StatusOK, Verdict: capsule.Approved}},
		{name: "findings", in: `{"status":"ok","verdict":"REJECTED","findings":[{"rule":15,"message":"self review"}],"usage":{"tokens":2}}`,
			want: executors.ReviewerReply{Status: executors.StatusOK, Verdict: capsule.Rejected, Findings: []capsule.Finding{{Rule: 15, Message: "self review"}}, Usage: capsule.Usage{Tokens: 2}}},
		{name: "failed needs no verdict", in: `{"status":"failed","error":"down"}`,
			want: executors.ReviewerReply{Status: executors.StatusFailed, Error: "down"}},
		{name: "missing verdict", in: `{}`, err: `malformed reply: verdict "": want APPROVED, CHANGES_REQUESTED or REJECTED`},
		{name: "unknown verdict", in: `{"verdict":"approved"}`, err: `malformed reply: verdict "approved"`},
		{name: "finding without message", in: `{"verdict":"APPROVED","findings":[{"field":"x"}]}`, err: "malformed reply: findings[0]: message is required"},
		{name: "negative review usage", in: `{"verdict":"APPROVED","usage":{"tokens":-3}}`, err: "malformed reply: invalid usage: -3 tokens / 0 dollars: tokens must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := executors.DecodeReviewerReply([]byte(tt.in))
			if tt.err != "" {
				require.ErrorIs(t, err, executors.ErrMalformedReply)
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestReplyResult(t *testing.T) {
	t.Parallel()
	res, err := executors.ExecutorReply{Status: executors.StatusFailed, Usage: capsule.Usage{Tokens: 4}}.Result()
	var failed *executors.FailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, "worker reported failure without a message", failed.Detail)
	require.Equal(t, int64(4), failed.Usage.Tokens)
	require.Equal(t, int64(4), res.Usage.Tokens)

	_, err = executors.ReviewerReply{Status: executors.StatusAccepted}.Result()
	require.ErrorIs(t, err, executors.ErrAccepted)

	rr, err := executors.ReviewerReply{Status: executors.StatusOK, Verdict: capsule.Approved}.Result()
	require.NoError(t, err)
	require.Equal(t, capsule.Approved, rr.Verdict)
}

func TestDecodeCompletion(t *testing.T) {
	t.Parallel()
	c, err := executors.DecodeCompletion([]byte(`{"kind":"execute","status":"ok","content":{"a":1},"usage":{"tokens":5}}`))
	require.NoError(t, err)
	require.Equal(t, executors.KindExecute, c.Kind)
	res, err := c.ExecutorReply().Result()
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(res.Content))
	require.Equal(t, "application/json", res.MediaType)
	require.Equal(t, int64(5), res.Usage.Tokens)

	require.Empty(t, c.CompletionToken, "a completion without a token decodes: its ingestor refuses it")
	c, err = executors.DecodeCompletion([]byte(`{"kind":"execute","status":"failed","error":"oom","completion_token":"5e5e"}`))
	require.NoError(t, err)
	require.Equal(t, "5e5e", c.CompletionToken)

	c, err = executors.DecodeCompletion([]byte(`{"kind":"review","verdict":"CHANGES_REQUESTED","findings":[{"message":"more"}]}`))
	require.NoError(t, err)
	require.Equal(t, executors.StatusOK, c.Status)
	rr, err := c.ReviewerReply().Result()
	require.NoError(t, err)
	require.Equal(t, capsule.ChangesRequested, rr.Verdict)

	c, err = executors.DecodeCompletion([]byte(`{"kind":"review","status":"failed","error":"gave up"}`))
	require.NoError(t, err)
	_, err = c.ReviewerReply().Result()
	require.ErrorContains(t, err, "gave up")

	for in, msg := range map[string]string{
		`{"status":"ok","content":1}`:                                   `kind "": want execute or review`,
		`{"kind":"execute","status":"accepted"}`:                        `status "accepted" in a completion`,
		`{"kind":"review","verdict":"LGTM"}`:                            `verdict "LGTM"`,
		`{"kind":"execute","status":"ok","content":null}`:               `without content`,
		`{"kind":"execute","content":1,"usage":{"tokens":-1}}`:          `invalid usage: -1 tokens`,
		`{"kind":"review","verdict":"APPROVED","usage":{"dollars":-2}}`: `invalid usage: 0 tokens / -2 dollars`,
		`{"kind":"execute","content":1,"completion_token":7}`:           `cannot unmarshal number`,
	} {
		_, err := executors.DecodeCompletion([]byte(in))
		require.ErrorIs(t, err, executors.ErrMalformedReply, in)
		require.ErrorContains(t, err, msg, in)
	}
}

func TestCompletionToken(t *testing.T) {
	t.Parallel()
	a, err := executors.NewCompletionToken()
	require.NoError(t, err)
	b, err := executors.NewCompletionToken()
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{64}$`, a)
	require.NotEqual(t, a, b, "every call a new token")
	hash := executors.CompletionTokenHash(a)
	require.Regexp(t, `^[0-9a-f]{64}$`, hash)
	require.NotEqual(t, a, hash)
	// SHA-256 of "test", a known answer.
	require.Equal(t, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", executors.CompletionTokenHash("test"))
	require.True(t, executors.CompletionTokenMatches(hash, a))
	for name, tc := range map[string][2]string{
		"another token":  {hash, b},
		"the hash":       {hash, hash},
		"no token":       {hash, ""},
		"no hash":        {"", a},
		"neither":        {"", ""},
		"upper case hex": {hash, strings.ToUpper(a)},
	} {
		require.False(t, executors.CompletionTokenMatches(tc[0], tc[1]), name)
	}
}

func TestCompletionSubject(t *testing.T) {
	t.Parallel()
	s := executors.CompletionSubject("0190f3a4-7b1c-4d2e-9f00-123456789abc", 2)
	require.Equal(t, "saga.complete.0190f3a4-7b1c-4d2e-9f00-123456789abc.2", s)
	id, cycle, err := executors.ParseCompletionSubject(s)
	require.NoError(t, err)
	require.Equal(t, "0190f3a4-7b1c-4d2e-9f00-123456789abc", id)
	require.Equal(t, 2, cycle)
	id, _, err = executors.ParseCompletionSubject("saga.complete.0190F3A4-7B1C-4D2E-9F00-123456789ABC.1")
	require.NoError(t, err)
	require.Equal(t, "0190f3a4-7b1c-4d2e-9f00-123456789abc", id, "canonical, like the checkpoint key")
	id, _, err = executors.ParseCompletionSubject("saga.complete.not-a-capsule-id.1")
	require.NoError(t, err)
	require.Equal(t, "not-a-capsule-id", id)

	for _, bad := range []string{"saga.complete.x", "saga.complete..1", "saga.complete.x.0", "saga.complete.x.y", "saga.complete.x.1.2", "other.x.1"} {
		_, _, err := executors.ParseCompletionSubject(bad)
		require.Error(t, err, bad)
	}
}

func TestRetryPolicyBackoff(t *testing.T) {
	t.Parallel()
	p := executors.RetryPolicy{Attempts: 10, Initial: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 50: time.Second} {
		for range 20 {
			got := p.Backoff(n)
			require.LessOrEqual(t, got, want, "attempt %d", n)
			require.GreaterOrEqual(t, got, want*9/10, "attempt %d", n)
		}
	}
	// Defaults.
	require.LessOrEqual(t, executors.RetryPolicy{}.Backoff(1), 500*time.Millisecond)
	require.LessOrEqual(t, executors.RetryPolicy{}.Backoff(100), 30*time.Second)
}

func TestReviewerFindingsAreCapped(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"verdict":"CHANGES_REQUESTED","findings":[`)
	for i := range 5000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"field":"f%d","message":"%s"}`, i, strings.Repeat("m", 3000))
	}
	b.WriteString(`]}`)
	r, err := executors.DecodeReviewerReply([]byte(b.String()))
	require.NoError(t, err)
	res, err := r.Result()
	require.NoError(t, err)
	require.Len(t, res.Findings, capsule.MaxFindings)
	require.Equal(t, "f0", res.Findings[0].Field)
	require.LessOrEqual(t, len(res.Findings[0].Message), capsule.MaxFindingMessage)
	require.Equal(t, "… and 4,901 more findings", res.Findings[capsule.MaxFindings-1].Message)
}

// TestExecuteCallInlinesSmallArtifacts: a prior or context artifact's
// content travels inline up to the limit, else only its ref, size and
// sha256; Shrink drops contents, largest first, until the request fits the
// max payload.
func TestExecuteCallInlinesSmallArtifacts(t *testing.T) {
	t.Parallel()
	small := json.RawMessage(`"` + strings.Repeat("s", 100) + `"`)
	big := json.RawMessage(`"` + strings.Repeat("b", 2000) + `"`)
	bigger := json.RawMessage(`"` + strings.Repeat("c", 3000) + `"`)
	c := &capsule.Capsule{CapsuleID: "01JAAAAAAAAAAAAAAAAAAAAAAA"}
	req := executors.Request{
		Capsule: c, Cycle: 2, InlineBytes: 1000,
		PriorArtifactRef: "artifact:01JAAAAAAAAAAAAAAAAAAAAAAA/1",
		PriorArtifact:    &capsule.Artifact{Ref: "artifact:01JAAAAAAAAAAAAAAAAAAAAAAA/1", SHA256: "abc", Size: int64(len(big)), Content: big},
		ContextArtifacts: []capsule.Artifact{{Ref: "artifact:x/1", Content: small}, {Ref: "artifact:y/1", Content: bigger}},
		OperatorAnswer:   &capsule.OperatorAnswer{Text: "yes", By: "ann"},
	}
	call, err := executors.NewExecuteCall(req)
	require.NoError(t, err)
	require.Nil(t, call.PriorArtifact.Content)
	require.Equal(t, int64(len(big)), call.PriorArtifact.Size)
	require.Equal(t, "abc", call.PriorArtifact.SHA256)
	require.Equal(t, string(small), string(call.ContextArtifacts[0].Content))
	require.Nil(t, call.ContextArtifacts[1].Content)
	require.Equal(t, bigger, req.ContextArtifacts[1].Content, "the request's artifacts are not changed")

	req.InlineBytes = 1 << 20
	call, err = executors.NewExecuteCall(req)
	require.NoError(t, err)
	whole, err := call.Shrink(0)
	require.NoError(t, err)
	b, err := call.Shrink(len(whole) - 1)
	require.NoError(t, err)
	require.Less(t, len(b), len(whole))
	var got executors.ExecuteCall
	require.NoError(t, json.Unmarshal(b, &got))
	require.Nil(t, got.ContextArtifacts[1].Content, "the largest goes first")
	require.NotNil(t, got.PriorArtifact.Content)
	require.NotNil(t, call.ContextArtifacts[1].Content, "Shrink changes a copy")
	b, err = call.Shrink(len(whole) - len(bigger) - len(big) + 10)
	require.NoError(t, err)
	got = executors.ExecuteCall{}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Nil(t, got.PriorArtifact.Content)
	require.NotNil(t, got.ContextArtifacts[0].Content)
	_, err = call.Shrink(50)
	require.Error(t, err, "too large even without contents")
}
