package adminsvc

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
)

func init() {
	schemaFor[VerbCompositionStatus], replySchema[VerbCompositionStatus] = "composition-status-request", "composition-status-reply"
	schemaFor[VerbCompositionCancel], replySchema[VerbCompositionCancel] = "composition-cancel-request", "composition-status-reply"
	schemaFor[VerbCompositionList], replySchema[VerbCompositionList] = "composition-list-request", "composition-list-reply"
	schemaFor[VerbCompositionPause], replySchema[VerbCompositionPause] = "composition-pause-request", "composition-status-reply"
	schemaFor[VerbCompositionResume], replySchema[VerbCompositionResume] = "composition-resume-request", "composition-status-reply"
	schemaFor[VerbCompositionReplay], replySchema[VerbCompositionReplay] = "composition-replay-request", "composition-status-reply"
	schemaFor[VerbCompositionDecide], replySchema[VerbCompositionDecide] = "composition-decide-request", "composition-status-reply"
}

// blocking is an executor that runs until its context ends.
type blocking struct{}

func (blocking) Execute(ctx context.Context, _ executors.Request) (executors.Result, error) {
	<-ctx.Done()
	return executors.Result{}, ctx.Err()
}

// TestCompositionEndpoints: status shows a run's steps by name while it
// runs; cancel (recorded with by) ends the step that runs and the one
// waiting for it, the run ends cancelled with exit code 1, and list shows
// it; a run that ended cannot be cancelled again; unknown ids are
// not_found, malformed requests bad_request.
func TestCompositionEndpoints(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	f := &fixture{nc: nc, workspace: capsuletest.Workspace(t)}
	reg := executors.NewRegistry()
	reg.RegisterExecutor("slow", blocking{})
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: testLogger(t), Workspace: f.workspace, Workers: 4, Executors: reg,
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
	svc, err := Start(nc, p.Admin(), Config{Logger: testLogger(t), Compositions: StoreCompositions(p.Store(), p.Admin())})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	composer, err := compose.Start(nc, p.Store(), compose.Config{Logger: testLogger(t), Rules: p.Rules()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, composer.Stop()) })
	runner, err := compose.StartRunner(ctx, p.Store(), compose.RunnerConfig{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(runner.Stop)

	var steps []any
	for _, st := range []struct{ name, kind, need string }{{"draft", "slow", ""}, {"fr", "stub", "draft"}} {
		target := st.name + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(f.workspace, target), []byte("x"), 0o644))
		d := capsuletest.New().Delete("capsule_id").Set("task.kind", st.kind).Set("target", "file:"+target).
			Set("constraints.resource_locks_required", []any{target})
		step := map[string]any{"name": st.name, "capsule": map[string]any(d)}
		if st.need != "" {
			step["needs"] = []string{st.need}
		}
		steps = append(steps, step)
	}
	doc, err := json.Marshal(map[string]any{"composition_id": "comp-1", "steps": steps})
	require.NoError(t, err)
	msg, err := nc.Request(compose.Subject+".alice", doc, 10*time.Second)
	require.NoError(t, err)
	r, err := compose.DecodeReply(msg)
	require.NoError(t, err)

	var o compose.Outcome
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-1"}, ""), &o))
		return o.Steps[1].State == string(capsule.Waiting)
	}, "fr waits for draft")
	require.Equal(t, "running", o.State)
	require.Equal(t, "draft", o.Steps[0].Name)
	require.Equal(t, r.Steps[0].CapsuleID, o.Steps[0].CapsuleID)
	require.Nil(t, o.Steps[0].ExitCode)

	// Pause: the record says paused, with by; the waiting step is not
	// paused itself (its need is). Resume: running again.
	require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionPause, CompositionCancelRequest{CompositionID: "comp-1", By: "ops", Reason: "hold"}, ""), &o))
	require.Equal(t, "paused", o.State)
	require.Equal(t, string(capsule.Waiting), o.Steps[1].State)
	rec, err := compose.GetRun(ctx, p.Store(), "comp-1", "alice", 1)
	require.NoError(t, err)
	require.Equal(t, "ops", rec.By)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-1"}, ""), &o))
		return o.Steps[0].State == string(capsule.Paused)
	}, "the running step pauses")
	require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionResume, CompositionCancelRequest{CompositionID: "comp-1", By: "ops"}, ""), &o))
	require.Equal(t, "running", o.State)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-1"}, ""), &o))
		return o.Steps[0].State == "running"
	}, "the step runs again")

	f.do(t, VerbCompositionCancel, CompositionCancelRequest{CompositionID: "comp-1"}, CodeBadRequest)
	require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionCancel, CompositionCancelRequest{CompositionID: "comp-1", By: "ops", Reason: "wrong draft"}, ""), &o))
	require.Equal(t, "cancelled", o.State)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-1", Run: 1}, ""), &o))
		return o.Steps[0].ExitCode != nil && o.Steps[1].ExitCode != nil
	}, "both steps end")
	require.Equal(t, compose.Summary{Total: 2, Failed: 2, ExitCode: 1}, o.Summary)
	for _, s := range o.Steps {
		require.Equal(t, string(capsule.Cancelled), s.State)
	}
	rec, err = compose.GetRun(ctx, p.Store(), "comp-1", "alice", 1)
	require.NoError(t, err)
	require.Equal(t, "ops", rec.By)
	require.Equal(t, "wrong draft", rec.Reason)
	f.do(t, VerbCompositionCancel, CompositionCancelRequest{CompositionID: "comp-1", By: "ops"}, CodeRefused)

	// Replayed, the cancelled steps run again: the slow one runs, the
	// other waits for it; a replay of a running round is refused.
	require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionReplay, CompositionCancelRequest{CompositionID: "comp-1", By: "ops"}, ""), &o))
	require.Equal(t, "running", o.State)
	require.Equal(t, 1, o.Round)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-1"}, ""), &o))
		return o.Steps[0].State == "running" && o.Steps[1].State == string(capsule.Waiting)
	}, "the replayed steps run and wait")
	f.do(t, VerbCompositionReplay, CompositionCancelRequest{CompositionID: "comp-1", By: "ops"}, CodeRefused)
	require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionCancel, CompositionCancelRequest{CompositionID: "comp-1", By: "ops"}, ""), &o))

	// The list reads the bucket's keys with a watch, then each record: a
	// record rewritten meanwhile (the cancel's steps ending) may be missed
	// by one listing, never by the next.
	var list CompositionListReply
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		list = CompositionListReply{}
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionList, CompositionListRequest{}, ""), &list))
		return len(list.Compositions) == 1 && list.Compositions[0].State == "cancelled"
	}, "the cancelled composition is listed")

	f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "nope"}, CodeNotFound)
	f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-1", Run: 2}, CodeNotFound)
	f.do(t, VerbCompositionStatus, []byte(`{"composition_id":"a b"}`), CodeBadRequest)
	f.do(t, VerbCompositionList, []byte(`{"limit":5000}`), CodeBadRequest)

	// A gated step waits for composition.decide: refused on a step not at
	// its gate, malformed decisions are bad_request; accepted, it runs.
	require.NoError(t, os.WriteFile(filepath.Join(f.workspace, "gated.txt"), []byte("x"), 0o644))
	d := capsuletest.New().Delete("capsule_id").Set("target", "file:gated.txt").Set("constraints.resource_locks_required", []any{"gated.txt"})
	doc, err = json.Marshal(map[string]any{"composition_id": "comp-gate", "steps": []any{
		map[string]any{"name": "ship", "gate": "operator", "capsule": map[string]any(d)},
	}})
	require.NoError(t, err)
	msg, err = nc.Request(compose.Subject+".alice", doc, 10*time.Second)
	require.NoError(t, err)
	_, err = compose.DecodeReply(msg)
	require.NoError(t, err)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-gate"}, ""), &o))
		return o.Steps[0].State == string(capsule.Paused)
	}, "the gated step waits")
	f.do(t, VerbCompositionDecide, CompositionDecideRequest{CompositionID: "comp-gate", Step: "ship", Decision: "maybe", By: "ops"}, CodeBadRequest)
	f.do(t, VerbCompositionDecide, CompositionDecideRequest{CompositionID: "comp-gate", Step: "ship", Decision: GateAccept}, CodeBadRequest)
	f.do(t, VerbCompositionDecide, CompositionDecideRequest{CompositionID: "comp-gate", Step: "nope", Decision: GateAccept, By: "ops"}, CodeNotFound)
	f.do(t, VerbCompositionDecide, CompositionDecideRequest{CompositionID: "comp-1", Step: "draft", Decision: GateAccept, By: "ops"}, CodeRefused)
	require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionDecide, CompositionDecideRequest{CompositionID: "comp-gate", Step: "ship", Decision: GateAccept, By: "ops", Reason: "go"}, ""), &o))
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-gate"}, ""), &o))
		return o.State == "completed"
	}, "accepted, the step runs and the run completes")
	f.do(t, VerbCompositionDecide, CompositionDecideRequest{CompositionID: "comp-gate", Step: "ship", Decision: GateAccept, By: "ops"}, CodeRefused)
}

// TestCompositionLoopEndpoints: a loop whose verifier (the stub, scripted
// per round) rejects every round with one finding stops for no_progress
// after round 3: status says paused, reason no_progress, pending lists
// the run with the verifier to decide on, resume is refused, replay too;
// composition.decide accept on the verifier lets the step after the loop
// run, and the run ends partial.
func TestCompositionLoopEndpoints(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	f := &fixture{nc: nc, workspace: capsuletest.Workspace(t)}
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: testLogger(t), Workspace: f.workspace, Workers: 4, Executors: executors.NewRegistry(),
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	svc, err := Start(nc, p.Admin(), Config{Logger: testLogger(t), Compositions: StoreCompositions(p.Store(), p.Admin())})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	composer, err := compose.Start(nc, p.Store(), compose.Config{Logger: testLogger(t), Rules: p.Rules()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, composer.Stop()) })
	runner, err := compose.StartRunner(ctx, p.Store(), compose.RunnerConfig{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(runner.Stop)

	var steps []any
	for _, st := range []struct{ name, need string }{{"draft", ""}, {"check", "draft"}, {"ship", "check"}} {
		target := st.name + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(f.workspace, target), []byte("x"), 0o644))
		d := capsuletest.New().Delete("capsule_id").Set("target", "file:"+target).Set("constraints.resource_locks_required", []any{target})
		if st.name == "check" {
			d = d.Set("metadata", map[string]any{"stub": map[string]any{"rounds": []any{[]any{"REJECTED"}, []any{"REJECTED"}, []any{"REJECTED"}}}})
		}
		step := map[string]any{"name": st.name, "capsule": map[string]any(d)}
		if st.need != "" {
			step["needs"] = []string{st.need}
		}
		steps = append(steps, step)
	}
	doc, err := json.Marshal(map[string]any{"composition_id": "comp-loop", "steps": steps,
		"loops": []any{map[string]any{"steps": []string{"draft"}, "verifier": "check", "max_rounds": 5}}})
	require.NoError(t, err)
	msg, err := nc.Request(compose.Subject+".alice", doc, 10*time.Second)
	require.NoError(t, err)
	_, err = compose.DecodeReply(msg)
	require.NoError(t, err)

	var o compose.Outcome
	natstest.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-loop"}, ""), &o))
		return o.State == "paused"
	}, "the loop never stopped")
	require.Equal(t, "no_progress", o.Reason)
	require.Equal(t, "no_progress", o.Loops[0].State)
	require.Equal(t, 3, o.Loops[0].Round)
	require.Equal(t, compose.StepHeld, o.Steps[2].State)

	var pending PendingReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbPending, struct{}{}, ""), &pending))
	require.Len(t, pending.Compositions, 1)
	require.Equal(t, "check", pending.Compositions[0].Verifier)
	require.Equal(t, []int{1, 1, 1}, pending.Compositions[0].Findings)

	f.do(t, VerbCompositionResume, CompositionCancelRequest{CompositionID: "comp-loop", By: "ops"}, CodeRefused)
	f.do(t, VerbCompositionReplay, CompositionCancelRequest{CompositionID: "comp-loop", By: "ops"}, CodeRefused)
	f.do(t, VerbCompositionDecide, CompositionDecideRequest{CompositionID: "comp-loop", Step: "check", Decision: GateAccept, By: "ops", Reason: "good enough"}, "")
	natstest.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbCompositionStatus, CompositionRequest{CompositionID: "comp-loop"}, ""), &o))
		return o.State == "partial"
	}, "accepted, the run never ended")
	require.Equal(t, "accepted", o.Loops[0].State)
	require.Equal(t, "ops", o.Loops[0].By)
	require.Equal(t, string(capsule.Completed), o.Steps[2].State)
	var after PendingReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbPending, struct{}{}, ""), &after))
	require.Empty(t, after.Compositions)
}
