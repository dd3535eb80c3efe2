package cli_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// recorder is the executor of every chain step kind: the stub's artifact,
// remembering the context artifacts of each call, failing the kind named
// in fail while it is set.
type recorder struct {
	mu     sync.Mutex
	inputs map[string][]capsule.Artifact // by capsule id, the last call's
	fail   atomic.Value                  // string: the kind that fails
}

func (r *recorder) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	r.mu.Lock()
	r.inputs[req.Capsule.CapsuleID] = req.ContextArtifacts
	r.mu.Unlock()
	if k, _ := r.fail.Load().(string); k != "" && k == req.Capsule.Task.Kind {
		return executors.Result{}, &executors.FailedError{Detail: "translator offline"}
	}
	return executors.Stub{}.Execute(ctx, req)
}

func (r *recorder) inputsOf(id string) []capsule.Artifact {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inputs[id]
}

// startChainOnline is startOnline with the chain kinds served by rec.
func startChainOnline(t *testing.T, rec *recorder) *online {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	o := &online{url: s.ClientURL(), js: js, workspace: capsuletest.Workspace(t)}
	reg := executors.NewRegistry()
	for _, k := range []string{"produce", "translate", "validate"} {
		reg.RegisterExecutor(k, rec)
	}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: logger, Workspace: o.workspace, Workers: 4, Executors: reg,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	svc, err := adminsvc.Start(nc, p.Admin(), adminsvc.Config{Logger: logger, Chains: adminsvc.StoreChains(p.Store()),
		Compositions: adminsvc.StoreCompositions(p.Store(), p.Admin())})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	composer, err := compose.Start(nc, p.Store(), compose.Config{Logger: logger, Rules: p.Rules()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, composer.Stop()) })
	runner, err := compose.StartRunner(ctx, p.Store(), compose.RunnerConfig{Logger: logger})
	require.NoError(t, err)
	t.Cleanup(runner.Stop)
	return o
}

// chainDoc is a three-step chain produce → translate → validate whose steps
// each have a target and lock of their own.
func chainDoc(t *testing.T, workspace, chainID string) []byte {
	t.Helper()
	var steps []any
	for i, kind := range []string{"produce", "translate", "validate"} {
		name := chainID + "-" + kind + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(workspace, name), []byte("x"), 0o644))
		d := capsuletest.New().Delete("capsule_id").Set("task.kind", kind).
			Set("task.title", "step "+kind).Set("target", "file:"+name).
			Set("constraints.resource_locks_required", []any{name})
		// Fixed times: the same document must build the same capsules.
		d.Set("created_at", time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339)).
			Set("deadline", time.Now().UTC().Truncate(time.Hour).Add(3*time.Hour).Format(time.RFC3339)).
			Set("spec.approved_at", time.Now().UTC().Truncate(time.Hour).Add(-time.Minute).Format(time.RFC3339))
		steps = append(steps, map[string]any(d))
		_ = i
	}
	b, err := json.Marshal(map[string]any{"chain_id": chainID, "steps": steps})
	require.NoError(t, err)
	return b
}

func chainOf(t *testing.T, o *online, id string) client.Chain {
	t.Helper()
	r := o.run(t, "chain", id, "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var ch client.Chain
	require.NoError(t, json.Unmarshal([]byte(r.out), &ch))
	return ch
}

// TestOnlineChain: a three-step chain runs in order, each later step's
// executor getting the step before's final artifact; publishing it again
// changes nothing; sagactl chain shows every step.
func TestOnlineChain(t *testing.T) {
	t.Parallel()
	rec := &recorder{inputs: map[string][]capsule.Artifact{}}
	o := startChainOnline(t, rec)
	doc := file(t, chainDoc(t, o.workspace, "report-42"))

	r := o.run(t, "publish", "--chain", doc, "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var pub struct {
		ChainID string `json:"chain_id"`
		Steps   []struct {
			Step      int    `json:"step"`
			CapsuleID string `json:"capsule_id"`
			IntakeSeq uint64 `json:"intake_seq"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &pub))
	require.Equal(t, "report-42", pub.ChainID)
	require.Len(t, pub.Steps, 3)
	for i, s := range pub.Steps {
		require.Equal(t, i, s.Step)
		id, ok := capsule.CanonicalID(s.CapsuleID)
		require.True(t, ok && id == s.CapsuleID, "step %d: sagad's id %q", i, s.CapsuleID)
	}
	last := pub.Steps[2].CapsuleID
	r = o.run(t, "wait", last, "--timeout", "30s")
	require.Equal(t, cli.ExitOK, r.code, "%s%s", r.out, r.errOut)

	ch := chainOf(t, o, "report-42")
	require.Len(t, ch.Steps, 3)
	var done []time.Time
	for i, s := range ch.Steps {
		require.Equal(t, capsule.Completed, s.State, "step %d", i)
		require.Equal(t, []string{"produce", "translate", "validate"}[i], s.Kind)
		cp := checkpointOf(t, o, s.CapsuleID)
		done = append(done, cp.UpdatedAt)
		in := rec.inputsOf(s.CapsuleID)
		if i == 0 {
			require.Empty(t, in)
			continue
		}
		require.Len(t, in, 1, "step %d gets the step before's final artifact", i)
		require.Equal(t, ch.Steps[i-1].CapsuleID, in[0].CapsuleID)
		require.Equal(t, "artifact:"+ch.Steps[i-1].CapsuleID+"/1", in[0].Ref)
		require.NotEmpty(t, in[0].Content)
		require.True(t, done[i-1].Before(done[i]), "steps complete in order")
	}

	// Published again: the same ids, no new runs.
	r = o.run(t, "publish", "--chain", doc)
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Equal(t, pub.Steps[0].CapsuleID+"\n"+pub.Steps[1].CapsuleID+"\n"+last+"\n", r.out)
	r = o.run(t, "wait", last, "--timeout", "5s")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	again := chainOf(t, o, "report-42")
	for i, s := range again.Steps {
		require.Equal(t, capsule.Completed, s.State)
		require.Equal(t, 0, checkpointOf(t, o, s.CapsuleID).Run, "step %d: no second run", i)
	}

	// The text table.
	r = o.run(t, "chain", "report-42")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "STEP")
	require.Contains(t, r.out, "translate")

	r = o.run(t, "chain", "no-such-chain")
	require.Equal(t, cli.ExitNotFound, r.code, r.errOut)

	// Outside a chain: a final ref to a completed capsule resolves at
	// REALITY_ANCHOR and reaches the executor; one to an unknown capsule
	// halts context_ref_missing.
	reader := o.own(t, capsuletest.New().Set("task.kind", "validate").
		Set("context_refs", []any{"artifact:" + last + "/final"}))
	r = o.run(t, "publish", file(t, reader.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", reader.ID(), "--timeout", "30s")
	require.Equal(t, cli.ExitOK, r.code, "%s%s", r.out, r.errOut)
	require.Equal(t, last, rec.inputsOf(reader.ID())[0].CapsuleID)
	ghost := "artifact:" + capsuletest.NewID() + "/final"
	lost := o.own(t, capsuletest.New().Set("context_refs", []any{ghost}))
	r = o.run(t, "publish", file(t, lost.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", lost.ID(), "--timeout", "30s", "-o", "json")
	require.Equal(t, cli.ExitFailure, r.code, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	require.Equal(t, capsule.ContextRefMissing(ghost).String(), s.HaltReason)
}

func checkpointOf(t *testing.T, o *online, id string) *capsule.Checkpoint {
	t.Helper()
	c, err := client.NewClient(context.Background(), o.js)
	require.NoError(t, err)
	cp, err := c.Checkpoint(context.Background(), id)
	require.NoError(t, err)
	return cp
}

// TestOnlineChainHaltAndReplay: the middle step failing halts the last with
// dependency_failed; replaying it lets the chain complete.
func TestOnlineChainHaltAndReplay(t *testing.T) {
	t.Parallel()
	rec := &recorder{inputs: map[string][]capsule.Artifact{}}
	rec.fail.Store("translate")
	o := startChainOnline(t, rec)
	r := o.run(t, "publish", "--chain", file(t, chainDoc(t, o.workspace, "report-43")))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	ids := strings.Fields(r.out)
	require.Len(t, ids, 3)
	mid, last := ids[1], ids[2]

	r = o.run(t, "wait", last, "--timeout", "30s")
	require.Equal(t, cli.ExitFailure, r.code, "%s%s", r.out, r.errOut)
	ch := chainOf(t, o, "report-43")
	require.Equal(t, capsule.Completed, ch.Steps[0].State)
	require.Equal(t, capsule.Halted, ch.Steps[1].State)
	require.Equal(t, capsule.ExecutorFailed("translator offline").String(), ch.Steps[1].HaltReason)
	require.Equal(t, capsule.Halted, ch.Steps[2].State)
	require.Equal(t, capsule.DependencyFailed(mid).String(), ch.Steps[2].HaltReason)

	rec.fail.Store("")
	r = o.run(t, "replay", mid, "--reason", "translator back")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", last, "--timeout", "30s")
	require.Equal(t, cli.ExitOK, r.code, "%s%s", r.out, r.errOut)
	for i, s := range chainOf(t, o, "report-43").Steps {
		require.Equal(t, capsule.Completed, s.State, "step %d", i)
	}
	in := rec.inputsOf(last)
	require.Len(t, in, 1)
	require.Equal(t, mid, in[0].CapsuleID)
}

// TestChainDocumentErrors: a bad chain document is refused before anything
// is sent, naming what is wrong.
func TestChainDocumentErrors(t *testing.T) {
	t.Parallel()
	good := capsuletest.New().Delete("capsule_id")
	for _, tc := range []struct {
		name string
		doc  any
		want string
	}{
		{"not json", "{", "not JSON"},
		{"no chain_id", map[string]any{"steps": []any{map[string]any(good)}}, "chain_id"},
		{"no steps", map[string]any{"chain_id": "c", "steps": []any{}}, "/steps"},
		{"bad chain_id", map[string]any{"chain_id": "a b", "steps": []any{map[string]any(good)}}, "/chain_id"},
		{"step without kind", map[string]any{"chain_id": "c", "steps": []any{map[string]any{"task": map[string]any{}}}}, "kind"},
		{"step with its own id", map[string]any{"chain_id": "c", "steps": []any{map[string]any{"capsule_id": capsuletest.NewID(), "task": map[string]any{"kind": "produce"}}}}, "/steps/0"},
		{"step that is no capsule", map[string]any{"chain_id": "c", "steps": []any{map[string]any{"task": map[string]any{"kind": "produce"}}}}, `step 0 "step-0": not a capsule`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b []byte
			if s, ok := tc.doc.(string); ok {
				b = []byte(s)
			} else {
				var err error
				b, err = json.Marshal(tc.doc)
				require.NoError(t, err)
			}
			// No server: a refused document never dials.
			r := run(t, "--nats-url", "nats://127.0.0.1:1", "publish", "--chain", file(t, b))
			require.Equal(t, cli.ExitUsage, r.code, r.errOut)
			require.Contains(t, r.errOut, tc.want)
		})
	}
	r := run(t, "publish", "--chain", "x.json", "y.json")
	require.Equal(t, cli.ExitUsage, r.code, r.errOut)
	r = run(t, "publish", "--chain", "x.json", "--seal")
	require.Equal(t, cli.ExitUsage, r.code, r.errOut)
}

// TestPublishChainForeignStep: when a step's id holds a capsule that is not
// the one sagad published for the chain, publish --chain says so and exits
// 5. Step ids are random, so the test makes the situation itself: the
// chain's record names an id another capsule took first.
func TestPublishChainForeignStep(t *testing.T) {
	t.Parallel()
	rec := &recorder{inputs: map[string][]capsule.Artifact{}}
	o := startChainOnline(t, rec)
	ctx := context.Background()
	b := chainDoc(t, o.workspace, "report-44")

	squatter := o.own(t, capsuletest.New())
	r := o.run(t, "publish", file(t, squatter.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", squatter.ID(), "--timeout", "30s")
	require.Equal(t, cli.ExitOK, r.code, "%s%s", r.out, r.errOut)

	doc, err := compose.Parse(b)
	require.NoError(t, err)
	ids, err := compose.NewStepIDs(len(doc.Steps))
	require.NoError(t, err)
	ids[1] = squatter.ID()
	_, digests, err := doc.Build(ids, 1)
	require.NoError(t, err)
	st, err := store.Open(ctx, o.js)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	require.NoError(t, compose.CreateRecord(ctx, st, &compose.Record{
		CompositionID: "report-44", Digest: hex.EncodeToString(sum[:]), Steps: ids, StepDigests: digests, CreatedAt: time.Now().UTC(),
	}))

	r = o.run(t, "publish", "--chain", file(t, b))
	require.Equal(t, cli.ExitRefused, r.code, "%s%s", r.out, r.errOut)
	require.Contains(t, r.errOut, "step 1 ("+squatter.ID()+") is not the one sagad published")
	ch := chainOf(t, o, "report-44")
	require.Equal(t, "foreign", string(ch.Steps[1].State))
}
