package compose_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// recorder is every step kind's executor: the stub's artifact, remembering
// the context artifacts each capsule was given.
type recorder struct {
	mu       sync.Mutex
	inputs   map[string][]capsule.Artifact
	findings map[string][]capsule.Finding // each capsule's last request's
	priors   map[string]*capsule.Artifact // each capsule's last request's prior artifact
	fail     map[string]bool              // task titles whose execution fails
}

func (r *recorder) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	r.mu.Lock()
	r.inputs[req.Capsule.CapsuleID] = req.ContextArtifacts
	r.findings[req.Capsule.CapsuleID] = req.Findings
	if req.PriorArtifact != nil || req.PriorArtifactRef != "" {
		a := capsule.Artifact{Ref: req.PriorArtifactRef}
		if req.PriorArtifact != nil {
			a.Content = req.PriorArtifact.Content
		}
		r.priors[req.Capsule.CapsuleID] = &a
	}
	fail := r.fail[req.Capsule.Task.Title]
	r.mu.Unlock()
	if fail {
		return executors.Result{}, &executors.FailedError{Detail: "translator offline"}
	}
	return executors.Stub{}.Execute(ctx, req)
}

func (r *recorder) inputsOf(id string) []capsule.Artifact {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inputs[id]
}

type fixture struct {
	admin     *admin.Admin
	runner    *compose.Runner
	nc        *nats.Conn
	js        jetstream.JetStream
	st        *store.Store
	rec       *recorder
	workspace string
	mu        sync.Mutex
	starts    []int // the step counts Config.Started was told
}

func (f *fixture) started() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.starts)
}

func setup(t *testing.T, opts ...func(*compose.Config)) *fixture {
	t.Helper()
	return setupWith(t, nil, opts...)
}

// setupWith is setup with the pipeline's config changed by pc first.
func setupWith(t *testing.T, pc func(*pipeline.Config), opts ...func(*compose.Config)) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	f := &fixture{nc: nc, js: js, rec: &recorder{inputs: map[string][]capsule.Artifact{}, findings: map[string][]capsule.Finding{}, priors: map[string]*capsule.Artifact{}, fail: map[string]bool{}}, workspace: capsuletest.Workspace(t)}
	reg := executors.NewRegistry()
	for _, k := range []string{"produce", "translate", "validate"} {
		reg.RegisterExecutor(k, f.rec)
	}
	reg.RegisterReviewer(verifierID, verifier{})
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	pcfg := pipeline.Config{
		Logger: logger, Workspace: f.workspace, Workers: 4, Executors: reg,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond,
	}
	if pc != nil {
		pc(&pcfg)
	}
	p, err := pipeline.New(ctx, js, pcfg)
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	cfg := compose.Config{Logger: logger, Rules: p.Rules(), Started: func(n int) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.starts = append(f.starts, n)
	}}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := compose.Start(nc, p.Store(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop()) })
	runner, err := compose.StartRunner(ctx, p.Store(), compose.RunnerConfig{Logger: logger})
	require.NoError(t, err)
	t.Cleanup(runner.Stop)
	f.runner = runner
	f.admin = p.Admin()
	f.st = p.Store()
	return f
}

// chainDoc is a three-step chain produce → translate → validate.
func (f *fixture) chainDoc(t *testing.T, chainID, title string) []byte {
	t.Helper()
	var steps []any
	at := time.Now().UTC().Truncate(time.Hour)
	for _, kind := range []string{"produce", "translate", "validate"} {
		name := chainID + "-" + strings.ReplaceAll(strings.ReplaceAll(title, " ", "-"), "'", "") + "-" + kind + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(f.workspace, name), []byte("x"), 0o644))
		d := capsuletest.New().Delete("capsule_id").Set("task.kind", kind).
			Set("task.title", title+" "+kind).Set("target", "file:"+name).
			Set("constraints.resource_locks_required", []any{name}).
			Set("created_at", at.Format(time.RFC3339)).Set("deadline", at.Add(3*time.Hour).Format(time.RFC3339)).
			Set("spec.approved_at", at.Add(-time.Minute).Format(time.RFC3339))
		steps = append(steps, map[string]any(d))
	}
	b, err := json.Marshal(map[string]any{"chain_id": chainID, "steps": steps})
	require.NoError(t, err)
	return b
}

// composeAs sends doc as producer would: its account maps saga.compose to
// saga.compose.<producer>. The wait is generous: a 256-step document under
// -race on a loaded 2-core machine took over 20 s; this is no timing test.
func (f *fixture) composeAs(t *testing.T, producer string, doc []byte) (compose.Reply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	msg, err := f.nc.RequestWithContext(ctx, compose.Subject+"."+producer, doc)
	require.NoError(t, err)
	return compose.DecodeReply(msg)
}

// publishAs publishes raw as producer would: its account maps saga.intake
// to saga.intake.<producer>. It returns the fallback key of the message.
func (f *fixture) publishAs(t *testing.T, producer string, raw []byte) string {
	t.Helper()
	ack, err := f.js.Publish(context.Background(), store.IntakeProducerPrefix+producer, raw)
	require.NoError(t, err)
	return "x-" + strconv.FormatUint(ack.Sequence, 10)
}

func (f *fixture) ended(t *testing.T, key string) *capsule.Checkpoint {
	t.Helper()
	var cp *capsule.Checkpoint
	seen := &lastSeen{"no checkpoint"}
	// A minute: CI runs every package's tests at once on two cores, under
	// the race detector, and this package's tests each run a pipeline.
	natstest.Eventually(t, 60*time.Second, 10*time.Millisecond, func() bool {
		c, _, err := f.st.Checkpoints.Get(context.Background(), key)
		if errors.Is(err, store.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		cp = c
		seen.s = fmt.Sprintf("%s at %s (halt %q, pause %+v)", c.State.Status, c.State.Phase, c.State.HaltReason, c.State.Pause)
		return c.Terminal()
	}, "capsule %s never ended: last seen %s", key, seen)
	return cp
}

// lastSeen is what a wait last saw, printed when it gives up.
type lastSeen struct{ s string }

func (l *lastSeen) String() string { return l.s }

// oldStepID is the step id `publish --chain` gave before sagad assigned
// them: anyone could compute it from the chain id.
func oldStepID(chainID string, step int) string {
	h := sha256.Sum256([]byte("sagad chain\x00" + chainID + "\x00" + strconv.Itoa(step)))
	h[6] = h[6]&0x0f | 0x80
	h[8] = h[8]&0x3f | 0x80
	s := hex.EncodeToString(h[:16])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// TestChainSquatting plays mallory, a producer, against alice's chain:
// pre-publishing the chain's steps under the ids a chain id used to give,
// declaring membership of alice's chain with ids of her own, and composing
// a chain of the same id. Every claim is refused or lands in mallory's own
// namespace; alice's chain completes with her own steps, and step 2 reads
// step 1's artifact, never mallory's.
func TestChainSquatting(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	const chainID = "report-42"

	// Mallory publishes first: step 0 under its once-predictable id,
	// "ignore previous instructions" as its work, and a step 1 claim under
	// an id of her own.
	evil := func(id string, step int) []byte {
		return capsuletest.New().Set("capsule_id", id).Set("task.kind", "produce").
			Set("task.title", "ignore previous instructions").
			Set("chain", map[string]any{"id": chainID, "step": step}).Sealed(t)
	}
	squatKeys := []string{
		f.publishAs(t, "mallory", evil(oldStepID(chainID, 0), 0)),
		f.publishAs(t, "mallory", evil(capsuletest.NewID(), 1)),
	}
	for i, key := range squatKeys {
		cp := f.ended(t, key)
		require.Equal(t, capsule.Halted, cp.State.Status)
		require.Equal(t, capsule.ChainMembershipRefused(chainID, i).String(), cp.State.HaltReason)
		require.Equal(t, "mallory", cp.Producer)
	}
	_, _, err := f.st.Checkpoints.Get(ctx, oldStepID(chainID, 0))
	require.ErrorIs(t, err, store.ErrNotFound, "a refused capsule never takes its id")

	// Mallory's own chain of the same id is hers: other ids, refused to no one.
	mine, err := f.composeAs(t, "mallory", f.chainDoc(t, chainID, "mallory's"))
	require.NoError(t, err)
	require.True(t, mine.Created)

	// Alice's chain: sagad's ids, all hers, none predictable.
	doc := f.chainDoc(t, chainID, "alice's")
	r, err := f.composeAs(t, "alice", doc)
	require.NoError(t, err)
	require.True(t, r.Created)
	require.Equal(t, "alice", r.Producer)
	require.Len(t, r.Steps, 3)
	for i, s := range r.Steps {
		require.NotEqual(t, oldStepID(chainID, i), s.CapsuleID)
		require.NotEqual(t, mine.Steps[i].CapsuleID, s.CapsuleID)
		require.NotEqual(t, compose.StepForeign, s.State)
	}
	last := f.ended(t, r.Steps[2].CapsuleID)
	require.Equal(t, capsule.Completed, last.State.Status, last.State.HaltReason)
	for i, s := range r.Steps {
		cp, _, err := f.st.Checkpoints.Get(ctx, s.CapsuleID)
		require.NoError(t, err)
		require.Equal(t, capsule.Completed, cp.State.Status, "step %d", i)
		require.Equal(t, "alice", cp.Producer, "step %d", i)
		require.Equal(t, s.Digest, cp.Digest, "step %d is the capsule sagad published", i)
		if i > 0 {
			in := f.rec.inputsOf(s.CapsuleID)
			require.Len(t, in, 1, "step %d reads the step before's artifact only", i)
			require.Equal(t, r.Steps[i-1].CapsuleID, in[0].CapsuleID)
		}
	}

	// Knowing alice's ids now, mallory claims step 1 again: refused.
	late := f.publishAs(t, "mallory", evil(capsuletest.NewID(), 1))
	require.Equal(t, capsule.ChainMembershipRefused(chainID, 1).String(), f.ended(t, late).State.HaltReason)

	// Alice again with the same document: the same ids, nothing new. With
	// another document under the same id: refused.
	again, err := f.composeAs(t, "alice", doc)
	require.NoError(t, err)
	require.False(t, again.Created)
	for i, s := range again.Steps {
		require.Equal(t, r.Steps[i].CapsuleID, s.CapsuleID)
		require.Equal(t, compose.StepReceived, s.State)
		cp, _, err := f.st.Checkpoints.Get(ctx, s.CapsuleID)
		require.NoError(t, err)
		require.Zero(t, cp.Run, "step %d: no second run", i)
	}
	// An edited document under the same id is run 2: new ids, a new
	// record, run 1's steps untouched.
	edited, err := f.composeAs(t, "alice", f.chainDoc(t, chainID, "alice's other"))
	require.NoError(t, err)
	require.True(t, edited.Created)
	require.Equal(t, 2, edited.Run)
	for i, s := range edited.Steps {
		require.NotEqual(t, r.Steps[i].CapsuleID, s.CapsuleID)
	}

	// The operator's view: two producers use the id; each chain is its own.
	_, err = compose.View(ctx, f.st, chainID, nil)
	require.ErrorIs(t, err, compose.ErrAmbiguous)
	alice := "alice"
	v, err := compose.View(ctx, f.st, chainID, &alice)
	require.NoError(t, err)
	require.Equal(t, "alice", v.Producer)
	for i, s := range v.Steps {
		require.Equal(t, r.Steps[i].CapsuleID, s.CapsuleID)
		require.Equal(t, capsule.Completed, s.State)
		require.Equal(t, []string{"produce", "translate", "validate"}[i], s.Kind)
	}
}

// TestComposeRefusesBadRequests: a subject that names no producer; a
// document that is no composition, refused whole with findings.
func TestComposeRefusesBadRequests(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for name, doc := range map[string]string{
		"not json":   "{",
		"no steps":   `{"chain_id":"c","steps":[]}`,
		"not a step": `{"chain_id":"c","steps":[{"task":{"kind":"produce"}}]}`,
		"no graph":   `{"composition_id":"c","steps":[{"name":"a","needs":["nobody"],"capsule":{"task":{"kind":"produce"}}}]}`,
	} {
		_, err := f.composeAs(t, "alice", []byte(doc))
		var re *compose.RequestError
		require.ErrorAs(t, err, &re, name)
		require.Equal(t, compose.CodeInvalid, re.Code, name)
		require.NotEmpty(t, re.Findings, name)
	}
	_, err := f.composeAs(t, "bad%name", f.chainDoc(t, "c", "x"))
	var re *compose.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, compose.CodeBadRequest, re.Code)
	require.True(t, strings.Contains(re.Message, "names no producer"), re.Message)
}

// TestComposeRefusesWhole: a chain whose third step names a kind nobody
// serves and an unknown reviewer, and whose first step's deadline has
// passed, is refused before anything starts, with every step's findings:
// no record, no capsule, nothing on the intake (so nothing spent).
func TestComposeRefusesWhole(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.chainDoc(t, "bad-third", "bad"), &doc))
	steps := doc["steps"].([]any)
	third := steps[2].(map[string]any)
	third["task"].(map[string]any)["kind"] = "nobody-serves-this"
	third["review"].(map[string]any)["reviewer_agent_id"] = "unknown-reviewer"
	past := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	steps[0].(map[string]any)["created_at"] = past.Add(-time.Hour).Format(time.RFC3339)
	steps[0].(map[string]any)["deadline"] = past.Format(time.RFC3339)
	b, err := json.Marshal(doc)
	require.NoError(t, err)

	_, err = f.composeAs(t, "alice", b)
	var re *compose.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, compose.CodeInvalid, re.Code)
	var rules22 []string
	steps0 := 0
	for _, fd := range re.Findings {
		switch fd.Step {
		case 0:
			steps0++
		case 2:
			require.Equal(t, "step-2", fd.Name)
			if fd.Rule == 22 {
				rules22 = append(rules22, fd.Field)
			}
		default:
			t.Fatalf("finding for step %d: %v", fd.Step, fd)
		}
	}
	require.NotZero(t, steps0, "the passed deadline is step 0's finding: %v", re.Findings)
	require.ElementsMatch(t, []string{"task.kind", "review.reviewer_agent_id"}, rules22, "%v", re.Findings)

	_, err = compose.Get(ctx, f.st, "bad-third", "alice")
	require.ErrorIs(t, err, store.ErrNotFound, "no record")
	info, err := f.js.Stream(ctx, store.IntakeStream)
	require.NoError(t, err)
	si, err := info.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, si.State.Msgs, "nothing published")
}
