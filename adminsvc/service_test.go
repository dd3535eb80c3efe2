package adminsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go's ObjectStore.Put (the pipeline's artifacts) can leave this
		// goroutine blocked: an upstream race, not ours (see cmd/internal/cli).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

type tlog struct{ t testing.TB }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// fixture is a NATS server with a running pipeline and the admin service on it.
type fixture struct {
	nc        *nats.Conn
	client    *Client
	pipeline  *client.Client
	workspace string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	f := &fixture{nc: nc, workspace: capsuletest.Workspace(t)}
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: testLogger(t), Workspace: f.workspace, Workers: 4,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
		Rules: rules.Config{DenyPaths: []string{".git", "infra"}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	svc, err := Start(nc, p.Admin(), Config{Logger: testLogger(t), Rules: p.Rules()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	f.client = NewClient(nc, ClientConfig{Timeout: 10 * time.Second})
	f.pipeline, err = client.NewClient(ctx, js)
	require.NoError(t, err)
	return f
}

// replySchema names the schema of each verb's reply.
var replySchema = map[string]string{
	VerbPause: "status-reply", VerbResume: "status-reply", VerbCancel: "status-reply", VerbDecide: "status-reply",
	VerbPhasePause: "phases-reply", VerbPhaseResume: "phases-reply", VerbPhaseList: "phases-reply", VerbPending: "pending-reply",
	VerbRules: "rules-reply", VerbReplay: "replay-reply", VerbReplayPreview: "replay-preview-reply",
}

// do sends req (a value, or raw bytes) on verb's subject as any NATS client
// would, checks request and answer against the published schemas, and
// returns the answer's body. wantCode "" expects success.
func (f *fixture) do(t *testing.T, verb string, req any, wantCode string) []byte {
	t.Helper()
	body, ok := req.([]byte)
	if !ok {
		var err error
		body, err = json.Marshal(req)
		require.NoError(t, err)
	}
	if wantCode != CodeBadRequest {
		require.NoError(t, validateSchema(t, schemaFor[verb], []byte(orEmptyObject(string(body)))), "request %s", body)
	}
	msg, err := f.nc.Request(Subject(verb), body, 10*time.Second)
	require.NoError(t, err)
	if wantCode == "" {
		require.Empty(t, msg.Header.Get(micro.ErrorCodeHeader), "error %s", msg.Data)
		require.NoError(t, validateSchema(t, replySchema[verb], msg.Data), "reply %s", msg.Data)
		return msg.Data
	}
	require.Equal(t, headerCodes[wantCode], msg.Header.Get(micro.ErrorCodeHeader), "reply %s", msg.Data)
	require.NoError(t, validateSchema(t, "error-reply", msg.Data), "reply %s", msg.Data)
	var e ErrorReply
	require.NoError(t, json.Unmarshal(msg.Data, &e))
	require.Equal(t, wantCode, e.Code)
	require.Equal(t, e.Message, msg.Header.Get(micro.ErrorHeader))
	return msg.Data
}

func (f *fixture) publish(t *testing.T, d capsuletest.Doc) {
	t.Helper()
	_, err := f.pipeline.Publish(context.Background(), d.Sealed(t), "")
	require.NoError(t, err)
}

func (f *fixture) waitState(t *testing.T, id string, want capsule.State) client.Status {
	t.Helper()
	var s client.Status
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		var err error
		s, err = f.pipeline.Status(context.Background(), id)
		return err == nil && s.State == want
	}, "capsule %s never %s (last %s)", id, want, &s.State)
	return s
}

func status(t *testing.T, b []byte) client.Status {
	t.Helper()
	var s client.Status
	require.NoError(t, json.Unmarshal(b, &s))
	return s
}

func phases(t *testing.T, b []byte) []admin.PhaseState {
	t.Helper()
	var r PhasesReply
	require.NoError(t, json.Unmarshal(b, &r))
	require.Len(t, r.Phases, capsule.NumPhases)
	return r.Phases
}

// TestService drives every verb over NATS against a real pipeline, with
// every request and reply checked against schemas/admin.
func TestService(t *testing.T) {
	t.Parallel()
	f := setup(t)

	// A gated capsule waits for an operator.
	gated := capsuletest.New().Set("review.operator_gate", true)
	f.publish(t, gated)
	f.waitState(t, gated.ID(), capsule.WaitingForOperator)

	var pending PendingReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbPending, []byte(""), ""), &pending))
	require.Len(t, pending.Items, 1)
	require.Equal(t, gated.ID(), pending.Items[0].CapsuleID)
	require.Equal(t, capsule.TriggerOperatorGate, pending.Items[0].Trigger)

	f.do(t, VerbPause, PauseRequest{ID: gated.ID(), By: "ann"}, CodeRefused)
	s := status(t, f.do(t, VerbDecide, DecideRequest{ID: gated.ID(), Decision: "revise", Rationale: "shorter", By: "carol"}, ""))
	require.Equal(t, 2, s.CyclesUsed)
	f.waitState(t, gated.ID(), capsule.WaitingForOperator)
	f.do(t, VerbDecide, DecideRequest{ID: gated.ID(), Decision: "accept", By: "carol"}, "")
	f.waitState(t, gated.ID(), capsule.Completed)
	for verb, req := range map[string]any{
		VerbPause:  PauseRequest{ID: gated.ID(), By: "ann"},
		VerbResume: ResumeRequest{ID: gated.ID(), By: "ann"},
		VerbCancel: CancelRequest{ID: gated.ID(), By: "ann"},
		VerbDecide: DecideRequest{ID: gated.ID(), Decision: "accept", By: "ann"},
	} {
		f.do(t, verb, req, CodeRefused)
	}
	f.do(t, VerbCancel, CancelRequest{ID: capsuletest.NewID(), By: "ann"}, CodeNotFound)

	// EXECUTION paused holds a capsule queued there: pause, resume (with
	// raised caps) and cancel it while it cannot move on by itself.
	ph := phases(t, f.do(t, VerbPhasePause, PhaseRequest{Phase: int(capsule.Execution), By: "ann"}, ""))
	require.True(t, ph[capsule.Execution].Paused)
	held := capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"})
	f.publish(t, held)
	// Its message waits at EXECUTION.
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		js, err := jetstream.New(f.nc)
		if err != nil {
			return false
		}
		cons, err := js.Consumer(context.Background(), store.PhaseStream(capsule.Execution), store.ConsumerName(capsule.Execution))
		if err != nil {
			return false
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 1
	}, "capsule never reached EXECUTION")
	s = status(t, f.do(t, VerbPause, PauseRequest{ID: held.ID(), Reason: "look first", By: "ann"}, ""))
	require.Equal(t, capsule.Paused, s.State)
	// EXECUTION, once this sagad has seen the phase's pause (the advance
	// into it is then written); REALITY_ANCHOR if the capsule got there
	// first (the deferred advances wait for EXECUTION's claim).
	pausedAt := capsule.Phase(s.Phase)
	require.Contains(t, []capsule.Phase{capsule.RealityAnchor, capsule.Execution}, pausedAt)
	deadline := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	s = status(t, f.do(t, VerbResume, ResumeRequest{ID: held.ID(), By: "ann", Tokens: 20000, Deadline: &deadline}, ""))
	require.Equal(t, capsule.InProgress, s.State)
	s = status(t, f.do(t, VerbCancel, CancelRequest{ID: held.ID(), Reason: "not needed", By: "ann"}, ""))
	require.Equal(t, capsule.Cancelled, s.State)
	// A replay's preview answers and changes nothing.
	var pv ReplayPreviewReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbReplayPreview, ReplayRequest{ID: held.ID(), By: "ann"}, ""), &pv))
	require.Nil(t, pv.WouldHalt, "findings: %v", pv.Findings)
	// Cancelled while its message waited at EXECUTION: a replay starts
	// where the checkpoint stopped.
	require.Equal(t, pausedAt, pv.From)
	require.Len(t, pv.AgentCalls, 2)
	require.Equal(t, []admin.LockPreview{{Path: "go.mod", Available: true}}, pv.Locks)
	still, err := f.pipeline.Status(context.Background(), held.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, still.State)
	require.Equal(t, 1, still.Run)
	f.do(t, VerbReplayPreview, ReplayRequest{ID: gated.ID(), By: "ann"}, CodeRefused)
	ph = phases(t, f.do(t, VerbPhaseResume, PhaseRequest{Phase: int(capsule.Execution)}, ""))
	require.False(t, ph[capsule.Execution].Paused)
	require.Len(t, phases(t, f.do(t, VerbPhaseList, struct{}{}, "")), capsule.NumPhases)
	var rep rules.Report
	require.NoError(t, json.Unmarshal(f.do(t, VerbRules, []byte(""), ""), &rep))
	require.Len(t, rep.Rules, len(rules.Constitution))

	// Malformed requests change nothing.
	for verb, body := range map[string]string{
		VerbPause:      `{"id":"","by":"ann"}`,
		VerbCancel:     `{"id":"x","by":"ann","extra":1}`,
		VerbDecide:     `{"id":"x","decision":"maybe","by":"ann"}`,
		VerbPhasePause: `{"phase":7}`,
		VerbPending:    `[]`,
		VerbRules:      `{"rule":6}`,
	} {
		f.do(t, verb, []byte(body), CodeBadRequest)
	}
}

// TestClient maps answers back to the errors callers match on.
func TestClient(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	doc := capsuletest.New()
	f.publish(t, doc)
	f.waitState(t, doc.ID(), capsule.Completed)

	_, err := f.client.Pause(ctx, PauseRequest{ID: doc.ID(), By: "ann"})
	require.ErrorIs(t, err, admin.ErrRefused)
	require.EqualError(t, err, "cannot pause "+doc.ID()+": the capsule is completed")
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, Subject(VerbPause), e.Subject)

	_, err = f.client.Cancel(ctx, CancelRequest{ID: capsuletest.NewID(), By: "ann"})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, admin.ErrRefused)

	_, err = f.client.Decide(ctx, DecideRequest{ID: doc.ID(), Decision: "accept"})
	require.ErrorIs(t, err, ErrBadRequest)
	require.EqualError(t, err, "by is required: who acts is recorded")

	list, err := f.client.Phases(ctx)
	require.NoError(t, err)
	require.Len(t, list, capsule.NumPhases)
	list, err = f.client.PausePhase(ctx, PhaseRequest{Phase: 2})
	require.NoError(t, err)
	require.True(t, list[2].Paused)
	list, err = f.client.ResumePhase(ctx, PhaseRequest{Phase: 2})
	require.NoError(t, err)
	require.False(t, list[2].Paused)
	items, err := f.client.Pending(ctx)
	require.NoError(t, err)
	require.Empty(t, items)
	require.NotNil(t, items, "an empty list, not null, for -o json")

	// The constitution answered is the pipeline's, not the defaults.
	rep, err := f.client.Rules(ctx)
	require.NoError(t, err)
	require.Equal(t, rules.VersionOf(rules.Config{DenyPaths: []string{".git", "infra"}}), rep.Version)
	require.NotEqual(t, rules.VersionOf(rules.Config{}), rep.Version, "the digest folds in its parameters")
	i := slices.IndexFunc(rep.Rules, func(r rules.RuleInfo) bool { return r.Number == 6 })
	require.Equal(t, map[string]any{"deny_paths": []any{".git", "infra"}}, rep.Rules[i].Params)
}

// TestNoSagad: with nobody serving the API, nothing is sent anywhere and
// the error says so.
func TestNoSagad(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.Connect(t, natstest.RunServer(t))
	c := NewClient(nc, ClientConfig{})
	_, err := c.Cancel(context.Background(), CancelRequest{ID: "c1", By: "ann"})
	require.ErrorIs(t, err, ErrNoSagad)
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.EqualError(t, err, "no sagad answered on saga.admin.cancel: is sagad running?")
}

// fake is an Actions whose Pause is scripted; the rest refuse.
type fake struct {
	pause func(ctx context.Context) (client.Status, error)
}

var errUnscripted = errors.New("unscripted")

func (f *fake) Pause(ctx context.Context, _, _, _ string) (client.Status, error) {
	return f.pause(ctx)
}
func (f *fake) Resume(context.Context, string, admin.ResumeOptions) (client.Status, error) {
	return client.Status{}, errUnscripted
}
func (f *fake) Cancel(context.Context, string, string, string) (client.Status, error) {
	return client.Status{}, errUnscripted
}
func (f *fake) Decide(context.Context, string, string, string, string) (client.Status, error) {
	return client.Status{}, errUnscripted
}
func (f *fake) PausePhaseBy(context.Context, capsule.Phase, string, string) error {
	return errUnscripted
}
func (f *fake) ResumePhase(context.Context, capsule.Phase) error     { return errUnscripted }
func (f *fake) Phases(context.Context) ([]admin.PhaseState, error)   { return nil, nil }
func (f *fake) Pending(context.Context) ([]admin.PendingItem, error) { return nil, nil }
func (f *fake) Replay(context.Context, string, admin.ReplayOptions) (admin.ReplayResult, error) {
	return admin.ReplayResult{}, errUnscripted
}

func (f *fake) PreviewReplay(context.Context, string, admin.ReplayOptions) (admin.ReplayPreview, error) {
	return admin.ReplayPreview{}, errUnscripted
}

// TestServiceFailures covers what a real pipeline rarely does on cue:
// an internal error, a handler past its timeout, a timed-out client, and
// requests in progress when the service stops.
func TestServiceFailures(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.Connect(t, natstest.RunServer(t))
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	script := make(chan func(ctx context.Context) (client.Status, error), 1)
	a := &fake{pause: func(ctx context.Context) (client.Status, error) { return (<-script)(ctx) }}
	svc, err := Start(nc, a, Config{Timeout: 200 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, svc.Stop(context.Background()))
		}
	})
	c := NewClient(nc, ClientConfig{})
	ctx := context.Background()
	req := PauseRequest{ID: "c1", By: "ann"}

	script <- func(context.Context) (client.Status, error) { return client.Status{}, errors.New("kv down") }
	_, err = c.Pause(ctx, req)
	require.ErrorIs(t, err, ErrInternal)
	require.EqualError(t, err, "kv down")

	script <- func(ctx context.Context) (client.Status, error) { <-ctx.Done(); return client.Status{}, ctx.Err() }
	_, err = c.Pause(ctx, req)
	require.ErrorIs(t, err, ErrInternal)
	require.EqualError(t, err, "not done within 200ms: context deadline exceeded")

	// A client that gives up first: sagad got the request, so the error
	// says the action may still happen.
	script <- func(context.Context) (client.Status, error) { <-release; return client.Status{Key: "c1"}, nil }
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Pause(short, req)
	cancel()
	require.ErrorIs(t, err, ErrNoSagad)
	require.Contains(t, err.Error(), "no sagad answered on saga.admin.pause within")
	require.Contains(t, err.Error(), "may still carry the action out")
	release <- struct{}{}

	// Stop waits for the request in progress, which is answered.
	var finished atomic.Bool
	script <- func(context.Context) (client.Status, error) {
		started <- struct{}{}
		<-release
		finished.Store(true)
		return client.Status{Key: "c1"}, nil
	}
	answered := make(chan error, 1)
	go func() {
		s, err := c.Pause(ctx, req)
		if err == nil && s.Key != "c1" {
			err = fmt.Errorf("reply %+v", s)
		}
		answered <- err
	}()
	<-started
	type stopResult struct {
		err      error
		finished bool
	}
	stopDone := make(chan stopResult, 1)
	go func() {
		err := svc.Stop(ctx)
		stopDone <- stopResult{err, finished.Load()}
	}()
	select {
	case r := <-stopDone:
		t.Fatalf("Stop returned (%v) with a request in progress", r.err)
	case err := <-answered:
		t.Fatalf("answered (%v) before the action finished", err)
	default:
	}
	release <- struct{}{}
	require.NoError(t, <-answered)
	r := <-stopDone
	require.NoError(t, r.err)
	require.True(t, r.finished, "Stop returned before the request in progress finished")
	stopped = true
	_, err = c.Pending(ctx)
	require.ErrorIs(t, err, ErrNoSagad, "a stopped service answers nothing")
}

// TestStopCancelsLateRequests: past Stop's context, requests in progress
// are cancelled and answered as a shutdown.
func TestStopCancelsLateRequests(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.Connect(t, natstest.RunServer(t))
	started := make(chan struct{})
	var finished atomic.Bool
	a := &fake{pause: func(ctx context.Context) (client.Status, error) {
		close(started)
		<-ctx.Done()
		finished.Store(true)
		return client.Status{}, ctx.Err()
	}}
	svc, err := Start(nc, a, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	answered := make(chan error, 1)
	go func() {
		_, err := NewClient(nc, ClientConfig{}).Pause(context.Background(), PauseRequest{ID: "c1", By: "ann"})
		answered <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.NoError(t, svc.Stop(ctx))
	require.True(t, finished.Load(), "Stop returned before the cancelled request did")
	err = <-answered
	require.ErrorIs(t, err, ErrInternal)
	require.EqualError(t, err, "sagad is shutting down: context canceled")
}
