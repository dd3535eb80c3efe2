package maintenance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestForgedCompletionsAreDropped: whoever can publish on saga.complete.>
// but was not given the call's completion token — no token, a wrong one,
// the hash a reader of checkpoints sees, garbage, a malformed body, a
// "failed" that would halt the capsule — neither completes nor halts a
// capsule awaiting accepted work, leaves no artifact, and is counted by
// cause; the worker's completion with the token then completes it, and a
// repeat of it is dropped as no longer awaited.
func TestForgedCompletionsAreDropped(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := sagatest.Run(t, func(c *pipeline.Config) { c.Metrics = metrics.New(reg, metrics.BuildInfo{}) })
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.Publish(t, doc.Sealed(t))
	f.WaitState(t, doc.ID(), capsule.Paused)
	right := f.Completion(t, `{"kind":"execute","status":"ok","content":{"answer":42},"usage":{"tokens":5,"dollars":0.001}}`)
	token := *f.AcceptedToken.Load()

	// The checkpoint keeps the token's hash, never the token.
	kv, err := f.JS.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, doc.ID())
	require.NoError(t, err)
	require.NotContains(t, string(e.Value()), token)
	hash := executors.CompletionTokenHash(token)
	require.Contains(t, string(e.Value()), `"awaiting_token_sha256":"`+hash+`"`)

	ok := `{"kind":"execute","status":"ok","content":{"forged":true},"usage":{"tokens":1,"dollars":0}}`
	failed := `{"kind":"execute","status":"failed","error":"forged failure"}`
	forged := []struct {
		name  string
		cycle int
		body  []byte
		cause string
	}{
		{"no token", 1, []byte(ok), metrics.TermCompletionUnauthenticated},
		{"a wrong token", 1, sagatest.WithToken(t, ok, strings.Repeat("0", 64)), metrics.TermCompletionUnauthenticated},
		{"the checkpoint's hash as token", 1, sagatest.WithToken(t, ok, hash), metrics.TermCompletionUnauthenticated},
		{"the token in upper case", 1, sagatest.WithToken(t, ok, strings.ToUpper(token)), metrics.TermCompletionUnauthenticated},
		{"a forged failure", 1, sagatest.WithToken(t, failed, strings.Repeat("f", 64)), metrics.TermCompletionUnauthenticated},
		{"garbage", 1, []byte("\x00not json"), metrics.TermCompletionMalformed},
		{"an empty body", 1, nil, metrics.TermCompletionMalformed},
		{"a malformed body with the right token", 1, sagatest.WithToken(t, `{"kind":"execute","status":"ok"}`, token), metrics.TermCompletionMalformed},
		{"negative usage with the right token", 1, sagatest.WithToken(t, `{"kind":"execute","content":1,"usage":{"tokens":-5}}`, token), metrics.TermCompletionMalformed},
		{"the right token for a cycle not awaited", 2, right, metrics.TermCompletionNotAwaited},
	}
	want := map[string]float64{}
	for _, fc := range forged {
		_, err := f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), fc.cycle), fc.body)
		require.NoError(t, err, fc.name)
		want[fc.cause]++
	}
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		for cause, n := range want {
			if sagatest.Terminated(t, reg, cause) != n {
				return false
			}
		}
		return true
	}, "every forged completion terminated and counted by cause")
	f.WaitCompletionsDrained(t)

	cp, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Paused, cp.State.Status, "still waiting for its worker")
	require.Equal(t, capsule.TriggerBlockedExternal, cp.State.Pause.Trigger)
	require.Nil(t, cp.State.Result, "nothing recorded")
	_, err = f.Store.Artifacts.Bytes(ctx, store.ArtifactRef(doc.ID(), 1))
	require.ErrorIs(t, err, jetstream.ErrObjectNotFound, "a forged completion leaves no artifact")

	_, err = f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), 1), right)
	require.NoError(t, err)
	s := f.WaitState(t, doc.ID(), capsule.Completed)
	require.Equal(t, int64(1), f.Executed.Load())
	b, err := f.Store.Artifacts.Bytes(ctx, store.ArtifactRef(doc.ID(), 1))
	require.NoError(t, err)
	require.Contains(t, string(b), `"answer":42`)
	require.NotContains(t, string(b), "forged")

	_, err = f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), 1), right)
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return sagatest.Terminated(t, reg, metrics.TermCompletionNotAwaited) == want[metrics.TermCompletionNotAwaited]+1
	}, "a repeat of a recorded completion is dropped and counted")
	after, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, s.History, after.History)
}

// TestCompletionTokenOfTheLatestCall: a forced resume calls the executor
// again with a new token; the first call's completion is then dropped as
// unauthenticated, and the second call's "failed" halts the capsule with
// the worker's error.
func TestCompletionTokenOfTheLatestCall(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := sagatest.Run(t, func(c *pipeline.Config) { c.Metrics = metrics.New(reg, metrics.BuildInfo{}) })
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.Publish(t, doc.Sealed(t))
	f.WaitState(t, doc.ID(), capsule.Paused)
	first := f.Completion(t, `{"kind":"execute","status":"ok","content":{"call":1}}`)

	_, err := f.Admin(t).Resume(ctx, doc.ID(), admin.ResumeOptions{By: "alice", Force: true})
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		if f.Executed.Load() != 2 {
			return false
		}
		cp, err := f.Client.Checkpoint(ctx, doc.ID())
		return err == nil && cp.State.Status == capsule.Paused &&
			cp.State.AwaitingTokenHash == executors.CompletionTokenHash(*f.AcceptedToken.Load())
	}, "the executor called again, and the capsule waiting for its completion")
	second := f.Completion(t, `{"kind":"execute","status":"failed","error":"out of quota","usage":{"tokens":3,"dollars":0}}`)
	require.NotEqual(t, string(first), string(second))

	_, err = f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), 1), first)
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return sagatest.Terminated(t, reg, metrics.TermCompletionUnauthenticated) == 1
	}, "the superseded call's completion is dropped")
	cp, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Nil(t, cp.State.Result)

	_, err = f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), 1), second)
	require.NoError(t, err)
	s := f.WaitState(t, doc.ID(), capsule.Halted)
	require.Equal(t, "executor_failed:out of quota", s.HaltReason)
	require.Equal(t, int64(2), f.Executed.Load())
}
