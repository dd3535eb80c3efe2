package executors

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireSaneUsage: a decoded usage is never negative or infinite.
func requireSaneUsage(t *testing.T, tokens int64, dollars float64) {
	t.Helper()
	require.GreaterOrEqual(t, tokens, int64(0))
	require.False(t, dollars < 0 || math.IsInf(dollars, 0) || math.IsNaN(dollars), "dollars %v", dollars)
}

var replySeeds = []string{
	`{"content":[1,2]}`,
	`{"status":"ok","content":"hello","media_type":"text/plain","usage":{"tokens":3,"dollars":0.25}}`,
	`{"status":"failed","error":"boom","usage":{"tokens":1,"dollars":1e-9}}`,
	`{"status":"accepted"}`,
	`{"status":"ok","verdict":"APPROVED","findings":[{"rule":3,"field":"f","message":"m"}]}`,
	`{"verdict":"CHANGES_REQUESTED","findings":[{"message":" "}]}`,
	`{"kind":"execute","status":"ok","content":{"a":1}}`,
	`{"kind":"review","status":"failed","error":""}`,
	`{"content":null}`, `{"usage":{"tokens":-1}}`, `{"usage":{"dollars":1e400}}`, ` `, `[1]`, `null`, `{"status":"done"}`,
}

// FuzzDecodeExecutorReply: an executor's reply (a NATS reply, a command's
// stdout, a completion's body) never panics the decoder; refusals wrap
// ErrMalformedReply; what it accepts re-validates (status known, usage sane,
// content on ok), maps to the matching Result and survives a re-encoding.
// Seeds: replySeeds and testdata/fuzz/FuzzDecodeExecutorReply.
func FuzzDecodeExecutorReply(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeExecutorReply(data)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedReply)
			return
		}
		requireSaneUsage(t, r.Usage.Tokens, r.Usage.Dollars)
		res, rerr := r.Result()
		switch r.Status {
		case StatusOK:
			require.NoError(t, rerr)
			require.NotEmpty(t, r.MediaType)
			require.NotEqual(t, "null", strings.TrimSpace(string(res.Content)))
		case StatusFailed:
			var failed *FailedError
			require.True(t, errors.As(rerr, &failed), "%v", rerr)
			require.NotEmpty(t, strings.TrimSpace(failed.Detail))
		case StatusAccepted:
			require.ErrorIs(t, rerr, ErrAccepted)
		default:
			t.Fatalf("status %q accepted", r.Status)
		}
		once, err := json.Marshal(r)
		require.NoError(t, err)
		r2, err := DecodeExecutorReply(once)
		require.NoError(t, err, "%s", once)
		twice, err := json.Marshal(r2)
		require.NoError(t, err)
		require.Equal(t, string(once), string(twice))
	})
}

// FuzzDecodeReviewerReply: as FuzzDecodeExecutorReply, for a reviewer: an
// ok reply has a valid verdict, every finding a message.
func FuzzDecodeReviewerReply(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeReviewerReply(data)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedReply)
			return
		}
		requireSaneUsage(t, r.Usage.Tokens, r.Usage.Dollars)
		for _, f := range r.Findings {
			require.NotEmpty(t, strings.TrimSpace(f.Message))
		}
		res, rerr := r.Result()
		switch r.Status {
		case StatusOK:
			require.NoError(t, rerr)
			require.True(t, res.Verdict.Valid(), "verdict %q", res.Verdict)
		case StatusFailed:
			var failed *FailedError
			require.True(t, errors.As(rerr, &failed), "%v", rerr)
		case StatusAccepted:
			require.ErrorIs(t, rerr, ErrAccepted)
		default:
			t.Fatalf("status %q accepted", r.Status)
		}
		once, err := json.Marshal(r)
		require.NoError(t, err)
		r2, err := DecodeReviewerReply(once)
		require.NoError(t, err, "%s", once)
		twice, err := json.Marshal(r2)
		require.NoError(t, err)
		require.Equal(t, string(once), string(twice))
	})
}

// FuzzDecodeCompletion: a completion message (anyone may publish on
// saga.complete.>) is ok or failed, of a known kind, and passes the checks
// of the reply of its kind; its completion_token survives a re-encoding
// (the ingestor hashes exactly what the worker sent).
func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"kind":"execute","status":"ok","content":{"a":1},"completion_token":"` + strings.Repeat("0f", 32) + `"}`,
		`{"kind":"execute","status":"failed","error":"oom","completion_token":"\u00e9\ud800"}`,
		`{"kind":"execute","content":1,"completion_token":null}`,
		`{"kind":"execute","content":1,"completion_token":["x"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCompletion(data)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedReply)
			return
		}
		require.Contains(t, []Status{StatusOK, StatusFailed}, c.Status)
		switch c.Kind {
		case KindExecute:
			_, err = DecodeExecutorReply(data)
		case KindReview:
			_, err = DecodeReviewerReply(data)
		default:
			t.Fatalf("kind %q accepted", c.Kind)
		}
		require.NoError(t, err)
		requireSaneUsage(t, c.Usage.Tokens, c.Usage.Dollars)
		once, err := json.Marshal(c)
		require.NoError(t, err)
		c2, err := DecodeCompletion(once)
		require.NoError(t, err, "%s", once)
		require.Equal(t, c.CompletionToken, c2.CompletionToken)
	})
}

// FuzzPartialReply: the stdout of a command that exited non-zero is read
// for what it offers and never trusted: no panic, a sane usage, only
// findings with a message.
func FuzzPartialReply(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte("not json at all\n"))
	f.Fuzz(func(t *testing.T, stdout []byte) {
		r := partialReply(stdout)
		requireSaneUsage(t, r.Usage.Tokens, r.Usage.Dollars)
		for _, f := range r.Findings {
			require.NotEmpty(t, strings.TrimSpace(f.Message))
		}
	})
}

// FuzzParseCompletionSubject: a subject parses only in the form
// CompletionSubject writes, to an id without '.' and a cycle from 1.
func FuzzParseCompletionSubject(f *testing.F) {
	for _, s := range []string{"saga.complete.c1.2", "saga.complete.c1.02", "saga.complete.c1.+2", "saga.complete..1", "saga.complete.a.b.1", "saga.complete.c.0", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		id, cycle, err := ParseCompletionSubject(subject)
		if err != nil {
			return
		}
		require.NotEmpty(t, id)
		require.NotContains(t, id, ".")
		require.GreaterOrEqual(t, cycle, 1)
		require.Equal(t, subject, CompletionSubject(id, cycle))
	})
}
