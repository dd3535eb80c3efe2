package executors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
)

// lockedBuffer is a log sink safe for the pipeline's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runModels runs a pipeline whose executor "llm" is an openai endpoint on
// oa and whose reviewer "llm-reviewer" an anthropic endpoint on an, logging
// every level into the returned buffer.
func runModels(t *testing.T, oa, an *fakeAPI) (*sagatest.Bundle, *lockedBuffer) {
	t.Helper()
	reg := modelRegistry(t, openAIEndpoint(oa.URL, "low-tier"), anthropicEndpoint(an.URL, "medium-tier"))
	logs := &lockedBuffer{}
	b := sagatest.Run(t, func(c *pipeline.Config) {
		c.Executors = reg
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return b, logs
}

func modelDoc(b *sagatest.Bundle, t *testing.T, model string) capsuletest.Doc {
	d := b.Own(t, capsuletest.New()).
		Set("task.kind", "llm").
		Set("review.reviewer_agent_id", "llm-reviewer")
	if model != "" {
		d = d.Set("task.model", model)
	}
	return d
}

// TestModelsEndToEnd is issue 32's "done when": an openai executor and an
// anthropic reviewer take a capsule through a revise cycle; the completion
// is the artifact, tokens are the APIs' usage and dollars the price
// table's, task.model picks the executor's tier, a rate limit is waited out
// and the key is never shown.
func TestModelsEndToEnd(t *testing.T) {
	oa := newFakeAPI(t,
		openAIText("gpt-big", "draft one", 100, 50, 0),
		openAIError(429, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-big", map[string]string{"retry-after": "1"}),
		openAIText("gpt-big", "draft two", 120, 60, 20),
	)
	an := newFakeAPI(t,
		anthropicVerdict("claude-mid", map[string]any{"verdict": "CHANGES_REQUESTED", "findings": []any{
			map[string]any{"message": "say more about streams", "field": "artifact", "severity": "minor"}}}, anthropicUsage(200, 20, 0, 100)),
		anthropicVerdict("claude-mid", map[string]any{"verdict": "APPROVED", "findings": []any{}}, anthropicUsage(210, 10, 0, 0)),
	)
	b, logs := runModels(t, oa, an)
	d := modelDoc(b, t, "high-tier")
	b.Publish(t, d.Sealed(t))
	st := b.Wait(t, d.ID())
	require.Equal(t, capsule.Completed, st.State, "halt %q, findings %v", st.HaltReason, st.Findings)
	assert.Equal(t, 2, st.CyclesUsed)

	// The completion is the artifact.
	require.NotEmpty(t, st.ArtifactRefs)
	art, err := b.Store.Artifacts.Get(context.Background(), st.ArtifactRefs[len(st.ArtifactRefs)-1])
	require.NoError(t, err)
	assert.JSONEq(t, `"draft two"`, string(art.Content))
	assert.Equal(t, "text/markdown", art.MediaType)

	// Tokens from the APIs' usage, dollars from the prices: the executor
	// at gpt-big (task.model's tier), the reviewer at claude-mid.
	exec := (100*10+50*30)/1e6 + (120*10+60*30)/1e6
	rev := (200*3+100*0.3+20*15)/1e6 + (210*3+10*15)/1e6
	assert.Equal(t, int64(150+180+320+220), st.BudgetUsed.Tokens)
	assert.InDelta(t, exec+rev, st.BudgetUsed.Dollars, 1e-9)

	seen := oa.requests()
	require.Len(t, seen, 3, "one call per cycle and one retry of the rate limit")
	for _, r := range seen {
		assert.Equal(t, "gpt-big", r.Body["model"], "task.model picks the tier")
	}
	assert.GreaterOrEqual(t, seen[2].At.Sub(seen[1].At), 900*time.Millisecond, "the rate limit's retry-after was waited out")
	revision := lastUserText(t, seen[1].Body)
	assert.Contains(t, revision, "say more about streams", "a revision's prompt carries the findings")
	assert.Contains(t, revision, "draft one", "and the prior artifact")
	assert.Equal(t, 0, oa.remaining()+an.remaining())

	requireNoKey(t, b, d.ID(), logs, st)
}

// TestModelPromptTooLongHalts: a 400 for a prompt too long halts at once
// with the API's own words, the attempt's usage (none) charged.
func TestModelPromptTooLongHalts(t *testing.T) {
	oa := newFakeAPI(t, openAIError(400, "invalid_request_error", "context_length_exceeded",
		"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", nil))
	an := newFakeAPI(t)
	b, logs := runModels(t, oa, an)
	d := modelDoc(b, t, "")
	b.Publish(t, d.Sealed(t))
	st := b.Wait(t, d.ID())
	require.Equal(t, capsule.Halted, st.State)
	assert.True(t, strings.HasPrefix(st.HaltReason, "executor_failed:openai llm: 400 Bad Request: This model's maximum context length is 8192 tokens"), st.HaltReason)
	assert.Len(t, oa.requests(), 1, "a 400 is not retried")
	requireNoKey(t, b, d.ID(), logs, st)
}

// TestModelKeyRefusedHalts: a 401 halts naming the key's variable.
func TestModelKeyRefusedHalts(t *testing.T) {
	oa := newFakeAPI(t, openAIError(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: "+testKey[:8]+"***", nil))
	b, logs := runModels(t, oa, newFakeAPI(t))
	d := modelDoc(b, t, "")
	b.Publish(t, d.Sealed(t))
	st := b.Wait(t, d.ID())
	require.Equal(t, capsule.Halted, st.State)
	assert.Contains(t, st.HaltReason, "the API refused the key in $SAGA_TEST_MODEL_KEY")
	requireNoKey(t, b, d.ID(), logs, st)
}

// TestModelNotAllowedHalts: task.model outside the tiers and prices halts
// at RECEPTION with a finding, before any call.
func TestModelNotAllowedHalts(t *testing.T) {
	oa, an := newFakeAPI(t), newFakeAPI(t)
	b, _ := runModels(t, oa, an)
	d := modelDoc(b, t, "ultra-tier")
	b.Publish(t, d.Sealed(t))
	st := b.Wait(t, d.ID())
	require.Equal(t, capsule.Halted, st.State)
	assert.Equal(t, "model_not_allowed:ultra-tier", st.HaltReason)
	require.NotEmpty(t, st.Findings)
	assert.Equal(t, "task.model", st.Findings[0].Field)
	assert.Contains(t, st.Findings[0].Message, "an unknown tier; allowed: ")
	assert.Empty(t, oa.requests())
}

// requireNoKey greps everything a run shows for the key: logs, status,
// history and the checkpoint as stored.
func requireNoKey(t *testing.T, b *sagatest.Bundle, id string, logs *lockedBuffer, st any) {
	t.Helper()
	status, err := json.Marshal(st)
	require.NoError(t, err)
	history, err := json.Marshal(b.History(t, id))
	require.NoError(t, err)
	var cps strings.Builder
	ctx := context.Background()
	for _, bucket := range []string{"SAGA_CHECKPOINTS", "SAGA_CAPSULES"} {
		kv, err := b.JS.KeyValue(ctx, bucket)
		require.NoError(t, err)
		keys, err := kv.Keys(ctx)
		require.NoError(t, err)
		for _, k := range keys {
			e, err := kv.Get(ctx, k)
			require.NoError(t, err)
			cps.Write(e.Value())
		}
	}
	require.NotEmpty(t, logs.String())
	for what, s := range map[string]string{"logs": logs.String(), "status": string(status), "history": string(history), "checkpoints and capsules": cps.String()} {
		require.NotContains(t, s, testKey, what)
		require.NotContains(t, s, testKey[8:], what)
	}
}

// lastUserText is the text of a chat request's last message.
func lastUserText(t *testing.T, body map[string]any) string {
	t.Helper()
	msgs, _ := body["messages"].([]any)
	require.NotEmpty(t, msgs)
	s, _ := msgs[len(msgs)-1].(map[string]any)["content"].(string)
	return s
}

// TestModelsComposition: a composition whose two steps ask for different
// tiers; each step's executor calls its own tier's model and is charged at
// its price, and the compose service judges task.model by sagad's models.
func TestModelsComposition(t *testing.T) {
	oa := newFakeAPI(t,
		openAIText("gpt-small", "the draft", 100, 10, 0),
		openAIText("gpt-big", "the polished text", 100, 10, 0),
	)
	an := newFakeAPI(t,
		anthropicVerdict("claude-mid", map[string]any{"verdict": "APPROVED", "findings": []any{}}, anthropicUsage(10, 1, 0, 0)),
		anthropicVerdict("claude-mid", map[string]any{"verdict": "APPROVED", "findings": []any{}}, anthropicUsage(10, 1, 0, 0)),
	)
	b, _ := runModels(t, oa, an)
	ctx := context.Background()
	svc, err := compose.Start(b.NC, b.Pipeline.Store(), compose.Config{Logger: b.Logger, Rules: b.Pipeline.Rules(), Models: testModels()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop()) })
	runner, err := compose.StartRunner(ctx, b.Pipeline.Store(), compose.RunnerConfig{Logger: b.Logger})
	require.NoError(t, err)
	t.Cleanup(runner.Stop)

	at := time.Now().UTC().Truncate(time.Hour)
	var steps []any
	for _, s := range []struct{ name, tier string }{{"draft", "low-tier"}, {"polish", "high-tier"}} {
		d := b.Own(t, capsuletest.New()).Delete("capsule_id").
			Set("task.kind", "llm").Set("task.title", s.name).Set("task.model", s.tier).
			Set("review.reviewer_agent_id", "llm-reviewer").
			Set("created_at", at.Format(time.RFC3339)).Set("deadline", at.Add(3*time.Hour).Format(time.RFC3339)).
			Set("spec.approved_at", at.Add(-time.Minute).Format(time.RFC3339))
		st := map[string]any{"name": s.name, "capsule": map[string]any(d)}
		if s.name == "polish" {
			st["needs"] = []string{"draft"}
		}
		steps = append(steps, st)
	}
	doc, err := json.Marshal(map[string]any{"composition_id": "tiers", "steps": steps})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	msg, err := b.NC.RequestWithContext(rctx, compose.Subject+".alice", doc)
	require.NoError(t, err)
	reply, err := compose.DecodeReply(msg)
	require.NoError(t, err)
	require.Len(t, reply.Steps, 2)

	var dollars []float64
	for _, s := range reply.Steps {
		st := b.Wait(t, s.CapsuleID)
		require.Equal(t, capsule.Completed, st.State, "%s: %s %v", s.Name, st.HaltReason, st.Findings)
		dollars = append(dollars, st.BudgetUsed.Dollars)
	}
	seen := oa.requests()
	require.Len(t, seen, 2)
	assert.Equal(t, "gpt-small", seen[0].Body["model"], "the draft's tier")
	assert.Equal(t, "gpt-big", seen[1].Body["model"], "the polish's tier")
	review := (10*3 + 1*15) / 1e6
	assert.InDelta(t, (100*2+10*8)/1e6+review, dollars[0], 1e-9)
	assert.InDelta(t, (100*10+10*30)/1e6+review, dollars[1], 1e-9)

	// A step asking for a model the config does not list is refused whole.
	bad := []any{map[string]any{"name": "x", "capsule": map[string]any(b.Own(t, capsuletest.New()).Delete("capsule_id").
		Set("task.kind", "llm").Set("task.model", "ultra-tier").Set("review.reviewer_agent_id", "llm-reviewer").
		Set("created_at", at.Format(time.RFC3339)).Set("deadline", at.Add(3*time.Hour).Format(time.RFC3339)).
		Set("spec.approved_at", at.Add(-time.Minute).Format(time.RFC3339)))}}
	doc, err = json.Marshal(map[string]any{"composition_id": "bad-tier", "steps": bad})
	require.NoError(t, err)
	msg, err = b.NC.RequestWithContext(rctx, compose.Subject+".alice", doc)
	require.NoError(t, err)
	_, err = compose.DecodeReply(msg)
	require.ErrorContains(t, err, "ultra-tier")
}
