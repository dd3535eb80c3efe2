package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/examples/worker/worker"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// The tests of this file play an attacker holding one role's credentials,
// as sagad wrote them into <data dir>/creds/, against sagad's embedded
// server: each finding of the role-isolation review has one. They pass
// because every role lives in a NATS account of its own (accounts.go).

// attackConfig is examples/sagad.json's demo executor and reviewer, a
// second executor kind, and a second producer.
const attackConfig = `{
  "producers": ["bob"],
  "executors": {
    "demo":  {"type": "nats", "subject": "agents.demo.execute", "timeout": "10s", "retries": 1},
    "other": {"type": "nats", "subject": "agents.other.execute", "timeout": "10s", "retries": 1}
  },
  "reviewers": {
    "demo-reviewer": {"type": "nats", "subject": "agents.demo.review", "timeout": "10s", "retries": 1}
  }
}`

// arena is a running sagad and the way into each of its roles.
type arena struct {
	t       *testing.T
	d       *daemon
	dataDir string
	// workspace is sagad's --workspace, where file: refs resolve.
	workspace string
	sagad     *nats.Conn
	js        jetstream.JetStream
}

func newArena(t *testing.T) *arena {
	t.Helper()
	return newArenaWith(t, attackConfig)
}

// newArenaWith is newArena with another config file's content.
func newArenaWith(t *testing.T, config string) *arena {
	t.Helper()
	dataDir, workspace := t.TempDir(), capsuletest.Workspace(t)
	// A target of its own for each capsule that must not wait for
	// another's lock.
	for i := range 3 {
		require.NoError(t, os.WriteFile(filepath.Join(workspace, fmt.Sprintf("t%d.md", i)), []byte("x\n"), 0o600))
	}
	cfg, err := parseConfig([]string{
		"--config", writeConfig(t, config),
		"--nats-listen", "127.0.0.1:-1",
		"--data-dir", dataDir,
		"--workspace", workspace,
		"--http-listen", "off",
		"--log-level", "warn",
		"--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	a := &arena{t: t, d: start(t, cfg), dataDir: dataDir, workspace: workspace}
	// The test watches sagad's state with sagad's own seed.
	a.sagad = a.conn(RoleSagad)
	a.js, err = jetstream.New(a.sagad)
	require.NoError(t, err)
	return a
}

// as is role's connection settings, with the seed sagad wrote for it.
func (a *arena) as(role string) natsconn.Options {
	return natsconn.Options{URL: a.d.url, NKey: filepath.Join(CredsDir(a.dataDir), role+natsconn.SeedExt)}
}

func (a *arena) conn(role string) *nats.Conn {
	a.t.Helper()
	nc, err := a.as(role).Connect(nats.MaxReconnects(0))
	require.NoError(a.t, err, role)
	a.t.Cleanup(nc.Close)
	return nc
}

// serveDemo serves the demo executor and reviewer, each with its own
// credentials, as examples/worker does.
func (a *arena) serveDemo() {
	a.t.Helper()
	for role, only := range map[string]string{"executor-demo": "execute", "reviewer-demo-reviewer": "review"} {
		svc, err := worker.Serve(a.conn(role), worker.Config{Only: only})
		require.NoError(a.t, err)
		a.t.Cleanup(func() { _ = svc.Stop() })
	}
}

// publish sends doc as role through the JetStream API of role's account:
// the acknowledgement must come back across the account boundary.
func (a *arena) publish(role string, doc capsuletest.Doc) {
	a.t.Helper()
	js, err := jetstream.New(a.conn(role))
	require.NoError(a.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, store.IntakeSubject, doc.Sealed(a.t))
	require.NoError(a.t, err, "%s publishes a capsule", role)
	require.Equal(a.t, store.IntakeStream, ack.Stream)
}

// checkpoint is the capsule's checkpoint as stored, nil if none.
func (a *arena) checkpoint(id string) jetstream.KeyValueEntry {
	a.t.Helper()
	kv, err := a.js.KeyValue(context.Background(), store.CheckpointsBucket)
	require.NoError(a.t, err)
	e, err := kv.Get(context.Background(), id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	require.NoError(a.t, err)
	return e
}

// awaitEnd waits for the capsule to reach a terminal state and returns it.
func (a *arena) awaitEnd(id string) capsule.State {
	a.t.Helper()
	var state capsule.State
	natstest.Eventually(a.t, 30*time.Second, 20*time.Millisecond, func() bool {
		e := a.checkpoint(id)
		if e == nil {
			return false
		}
		var cp capsule.Checkpoint
		if json.Unmarshal(e.Value(), &cp) != nil {
			return false
		}
		state = cp.State.Status
		return state.Terminal()
	}, "capsule %s never ended", id)
	return state
}

// lastOn is the last message sagad's account stores on subject in stream,
// nil if none.
func (a *arena) lastOn(stream, subject string) *jetstream.RawStreamMsg {
	a.t.Helper()
	s, err := a.js.Stream(context.Background(), stream)
	require.NoError(a.t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	require.NoError(a.t, err)
	return m
}

// redirect publishes on subject as nc with the reply set to target and a
// header that makes the JetStream publish fail (so the stream answers at
// once and stores nothing). It returns a subscription on target in nc's
// own account, where the answer must land, and returns once the stream has
// answered a second such publish (a stream answers in order, so the first
// answer has gone wherever it went).
func redirect(t *testing.T, nc *nats.Conn, subject, target string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	forged := func() *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set(jetstream.ExpectedLastSeqHeader, "999999")
		m.Data = []byte(`{"forged":true}`)
		return m
	}
	m := forged()
	m.Reply = target
	require.NoError(t, nc.PublishMsg(m))
	_, err = nc.RequestMsg(forged(), 10*time.Second)
	require.NoError(t, err, "the stream answers")
	return sub
}

// requireLanded requires the stream's refusal on sub, the attacker's own.
func requireLanded(t *testing.T, sub *nats.Subscription) {
	t.Helper()
	got, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err, "the stream's answer comes back to the attacker's own account, on %s", sub.Subject)
	require.Contains(t, string(got.Data), "wrong last sequence", "the answer is the stream's refusal")
}

// Finding: a producer publishing on saga.intake with a reply subject naming
// one of sagad's keys had the stream's answer stored there: a completed
// capsule's checkpoint replaced, a wave reopened, a lock held, an artifact
// destroyed. A worker did the same through saga.complete.>.
func TestAttackAckRedirect(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	doc := capsuletest.New()
	a.publish(RoleProducer, doc)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	before := a.checkpoint(doc.ID())

	producer, worker := a.conn(RoleProducer), a.conn("executor-demo")
	targets := []struct{ stream, subject string }{
		{"KV_" + store.CheckpointsBucket, "$KV." + store.CheckpointsBucket + "." + doc.ID()},
		{"KV_SAGA_BUDGETS", "$KV.SAGA_BUDGETS.wave.w1"},
		{"KV_SAGA_LOCKS", "$KV.SAGA_LOCKS.README-md"},
		{"OBJ_" + store.ArtifactsBucket, "$O." + store.ArtifactsBucket + ".M.eA"},
		{"KV_" + store.ArtifactRecordsBucket, "$KV." + store.ArtifactRecordsBucket + ".x-forged/1"},
	}
	var subs []*nats.Subscription
	for _, tt := range targets {
		subs = append(subs,
			redirect(t, producer, store.IntakeSubject, tt.subject),
			redirect(t, worker, "saga.complete."+doc.ID()+".1", tt.subject))
	}
	after := a.checkpoint(doc.ID())
	require.Equal(t, before.Revision(), after.Revision(), "the checkpoint is sagad's")
	require.Equal(t, before.Value(), after.Value())
	for _, tt := range targets[1:] {
		if _, err := a.js.Stream(context.Background(), tt.stream); errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // no such bucket yet: nothing could land in it
		}
		require.Nil(t, a.lastOn(tt.stream, tt.subject), "nothing written on %s", tt.subject)
	}
	for _, sub := range subs {
		requireLanded(t, sub)
	}
}

// Finding: the operator stored forged bytes as an intake, then had
// JetStream's DIRECT.GET answer onto a checkpoint key. The operator's
// account has no JetStream: nothing answers it there.
func TestAttackOperatorDirectGet(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	doc := capsuletest.New()
	a.publish(RoleOperator, doc)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	before := a.checkpoint(doc.ID())

	op := a.conn(RoleOperator)
	_, err := op.Request("$JS.API.DIRECT.GET.KV_"+store.CapsulesBucket, []byte(`{"last_by_subj":"$KV.SAGA_CAPSULES.x"}`), 2*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders, "no JetStream API in the operator's account")
	m := nats.NewMsg("$JS.API.DIRECT.GET.KV_" + store.CapsulesBucket)
	m.Reply = "$KV." + store.CheckpointsBucket + "." + doc.ID()
	m.Data = []byte(`{"seq":1}`)
	require.NoError(t, op.PublishMsg(m))
	require.NoError(t, op.Flush())
	ojs, err := jetstream.New(op)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = ojs.AccountInfo(ctx)
	require.Error(t, err, "the operator's account has no JetStream")

	// The operator's own door still opens: the admin service.
	_, err = adminsvc.NewClient(op, adminsvc.ClientConfig{}).Phases(ctx)
	require.NoError(t, err, "the operator calls the admin service")
	after := a.checkpoint(doc.ID())
	require.Equal(t, before.Revision(), after.Revision())
}

// sniffer counts the messages one role's connection sees on every subject
// of its account, and those that carry needle.
type sniffer struct {
	nc     *nats.Conn
	mu     sync.Mutex
	needle []byte
	seen   []string
}

func sniff(t *testing.T, nc *nats.Conn, needle string) *sniffer {
	t.Helper()
	s := &sniffer{nc: nc, needle: []byte(needle)}
	for _, subject := range []string{">", "_INBOX.>", "$JS.>"} {
		_, err := nc.Subscribe(subject, func(m *nats.Msg) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.carries(m) {
				s.seen = append(s.seen, m.Subject)
			}
			// A thief answers whatever it can: +NXT with a reply of its
			// own acks a pull consumer's delivery and has the next one
			// delivered to the thief instead of sagad.
			if m.Reply != "" {
				_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: nc.NewRespInbox(), Data: []byte("+NXT")})
			}
		})
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	return s
}

// carries reports whether m names the needle: in its subject, body or
// headers (a phase message is headers only).
func (s *sniffer) carries(m *nats.Msg) bool {
	if bytes.Contains(m.Data, s.needle) || bytes.Contains([]byte(m.Subject), s.needle) {
		return true
	}
	for _, vs := range m.Header {
		for _, v := range vs {
			if bytes.Contains([]byte(v), s.needle) {
				return true
			}
		}
	}
	return false
}

func (s *sniffer) caught(t *testing.T) []string {
	t.Helper()
	// A round trip: what the server routed before has been delivered.
	require.NoError(t, s.nc.Flush())
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// Findings: a producer and a worker subscribed to _INBOX.> saw other
// producers' capsules, checkpoints, executor replies and admin replies; a
// worker answering sagad's pull deliveries with +NXT took phase messages
// away from sagad. Here both listen on every subject of their accounts
// (and answer everything with +NXT) while another producer's capsules run
// through a NATS executor and reviewer and the operator reads through the
// admin service: they see none of it, and every capsule completes.
func TestAttackInboxSniffingAndNextTheft(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	a.serveDemo()
	var docs []capsuletest.Doc
	for i := range 3 {
		// A lock each: the capsules run side by side.
		docs = append(docs, capsuletest.New().Set("task.kind", "demo").Set("review.reviewer_agent_id", "demo-reviewer").
			Set("target", fmt.Sprintf("file:t%d.md", i)).Set("constraints.resource_locks_required", []any{fmt.Sprintf("t%d.md", i)}))
	}
	// Every capsule id shares no prefix with another; the sniffers look
	// for any of them, in subjects and bodies.
	sniffers := map[string][]*sniffer{}
	for _, role := range []string{"producer-bob", "executor-other"} {
		for _, d := range docs {
			sniffers[role] = append(sniffers[role], sniff(t, a.conn(role), d.ID()))
		}
	}
	// The worker also forges acks of sagad's phase consumers.
	thief := a.conn("executor-other")
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		require.NoError(t, thief.Publish("$JS.ACK."+store.PhaseStream(ph)+"."+store.ConsumerName(ph)+".1.1.1.1.0", []byte("+NXT")))
	}
	require.NoError(t, thief.Flush())

	for _, d := range docs {
		a.publish(RoleProducer, d)
	}
	op := a.conn(RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := adminsvc.NewClient(op, adminsvc.ClientConfig{})
	for _, d := range docs {
		require.Equal(t, capsule.Completed, a.awaitEnd(d.ID()), "capsule %s", d.ID())
		_, err := admin.Phases(ctx)
		require.NoError(t, err)
	}
	for role, ss := range sniffers {
		for i, s := range ss {
			require.Empty(t, s.caught(t), "%s saw capsule %s", role, docs[i].ID())
		}
	}
}

// Finding: every worker shared one user and agents.>, so a plain
// subscription answered reviewer calls APPROVED before the real, slower
// reviewer. Here the demo executor's credentials subscribe to the
// reviewer's subject and answer at once: the subscription is its own
// account's and no call reaches it; the real reviewer, answering after a
// delay, gives every verdict.
func TestAttackExecutorAnswersReviewerCalls(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	exec, err := worker.Serve(a.conn("executor-demo"), worker.Config{Only: "execute"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = exec.Stop() })

	var real, forged atomic.Int32
	answer := func(v capsule.Verdict, msg string) []byte {
		b, err := json.Marshal(executors.ReviewerReply{Status: executors.StatusOK, Verdict: v, Findings: []capsule.Finding{{Message: msg}}})
		require.NoError(t, err)
		return b
	}
	// The real reviewer rejects, after a while.
	_, err = a.conn("reviewer-demo-reviewer").Subscribe(worker.DefaultReviewSubject, func(m *nats.Msg) {
		real.Add(1)
		time.AfterFunc(200*time.Millisecond, func() { _ = m.Respond(answer(capsule.Rejected, "the real reviewer rejects")) })
	})
	require.NoError(t, err)
	// The executor's credentials answer reviewer calls APPROVED at once.
	thief := a.conn("executor-demo")
	for _, subject := range []string{worker.DefaultReviewSubject, "agents.>"} {
		_, err = thief.Subscribe(subject, func(m *nats.Msg) {
			if m.Subject == worker.DefaultReviewSubject {
				forged.Add(1)
				_ = m.Respond(answer(capsule.Approved, "approved by the executor"))
			}
		})
		require.NoError(t, err)
	}
	require.NoError(t, thief.Flush())

	doc := capsuletest.New().Set("task.kind", "demo").Set("review.reviewer_agent_id", "demo-reviewer").Set("review.max_cycles", 1)
	a.publish(RoleProducer, doc)
	require.NotEqual(t, capsule.Completed, a.awaitEnd(doc.ID()), "the real reviewer's rejection stands")
	require.Positive(t, real.Load(), "the real reviewer was called")
	require.Zero(t, forged.Load(), "no reviewer call reached the executor's credentials")
}

// TestIntakeNamesTheProducer: a capsule a producer publishes on saga.intake
// in its own account reaches sagad's account on saga.intake.<producer>,
// whoever the capsule claims to be, and the operator's on
// saga.intake.operator: the producer's identity is the subject, which no
// producer chooses.
func TestIntakeNamesTheProducer(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	sub, err := a.sagad.SubscribeSync(store.IntakeSubject + ".>")
	require.NoError(t, err)
	require.NoError(t, a.sagad.Flush())
	for role, want := range map[string]string{RoleProducer: "saga.intake.producer", "producer-bob": "saga.intake.bob", RoleOperator: "saga.intake.operator"} {
		doc := capsuletest.New()
		a.publish(role, doc)
		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, want, m.Subject, role)
		require.Contains(t, string(m.Data), doc.ID())
		require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()), "a capsule from %s runs", role)
	}
	// A producer cannot name another's intake subject: it is not imported.
	requireUnreached(t, a.conn(RoleProducer), RoleProducer, "saga.intake.bob")
}

// TestAttackExecutorPublishesRootCapsule: an executor's account imports
// saga.intake so that a worker serving a call can delegate (a child
// capsule with parent_capsule_id and the call's token). Its capsules
// reach sagad on saga.intake.executor-<kind>, and a capsule of its own
// (no parent) or one naming a parent without a call's token halts
// parent_refused and never takes its id; a reviewer's account has no
// intake at all.
func TestAttackExecutorPublishesRootCapsule(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	sub, err := a.sagad.SubscribeSync(store.IntakeSubject + ".>")
	require.NoError(t, err)
	require.NoError(t, a.sagad.Flush())
	js, err := jetstream.New(a.conn("executor-demo"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, doc := range []capsuletest.Doc{capsuletest.New(), capsuletest.New().Set("parent_capsule_id", capsuletest.NewID())} {
		ack, err := js.Publish(ctx, store.IntakeSubject, doc.Sealed(t))
		require.NoError(t, err, "an executor's account publishes on saga.intake")
		var m *nats.Msg
		for m == nil || !strings.Contains(string(m.Data), doc.ID()) {
			m, err = sub.NextMsg(10 * time.Second)
			require.NoError(t, err)
		}
		require.Equal(t, "saga.intake.executor-demo", m.Subject)
		key := "x-" + strconv.FormatUint(ack.Sequence, 10)
		require.Equal(t, capsule.Halted, a.awaitEnd(key))
		var cp capsule.Checkpoint
		require.NoError(t, json.Unmarshal(a.checkpoint(key).Value(), &cp))
		require.True(t, strings.HasPrefix(cp.State.HaltReason, string(capsule.CodeParentRefused)), cp.State.HaltReason)
		require.Nil(t, a.checkpoint(doc.ID()), "the id stays free")
	}
	requireUnreached(t, a.conn("reviewer-demo-reviewer"), "reviewer-demo-reviewer", store.IntakeSubject)
}

// Finding: a replay with a corrected capsule, sent with the operator's own
// seed, adopted a parent (or another producer agent, or a wave) the
// capsule never had: accepted, unlinked and unchecked. A correction may
// change the work, not who the capsule is: each such change is refused
// with the field named, and the checkpoint is untouched.
func TestAttackOperatorReplayTakesAnotherIdentity(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	a.serveDemo()
	other := capsuletest.New().Set("task.kind", "demo").Set("target", "file:t1.md").Set("constraints.resource_locks_required", []any{"t1.md"})
	a.publish("producer-bob", other)
	require.Equal(t, capsule.Completed, a.awaitEnd(other.ID()))
	doc := capsuletest.New().Set("task.kind", "demo").Set("target", "file:missing.md")
	a.publish(RoleProducer, doc)
	require.Equal(t, capsule.Halted, a.awaitEnd(doc.ID()))
	before := a.checkpoint(doc.ID())

	op := adminsvc.NewClient(a.conn(RoleOperator), adminsvc.ClientConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for field, v := range map[string]string{"parent_capsule_id": other.ID(), "producer_agent_id": "agent-of-bob", "wave_id": "w-bob"} {
		var bad capsuletest.Doc
		require.NoError(t, json.Unmarshal(doc.Unsealed(t), &bad))
		bad.Set("target", "file:t0.md").Set("constraints.resource_locks_required", []any{"t0.md"}).Set(field, v)
		_, err := op.Replay(ctx, adminsvc.ReplayRequest{ID: doc.ID(), By: "mallory", Capsule: bad.Sealed(t)})
		require.ErrorIs(t, err, admin.ErrRefused, field)
		require.Contains(t, err.Error(), field+": a correction keeps who the capsule is", field)
	}
	require.Equal(t, before.Revision(), a.checkpoint(doc.ID()).Revision(), "nothing recorded")
}

// Finding: every role but sagad's could open connections and
// subscriptions without bound on the server sagad shares with it. Each
// generated account now has limits: a hostile client of one role reaches
// its account's bound, refused by nats-server, and sagad goes on.
func TestAttackRoleExhaustsServer(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	for role, limits := range map[string]AccountLimits{"executor-demo": WorkerLimits, RoleProducer: ProducerLimits, RoleOperator: OperatorLimits} {
		errs := make(chan error, 16)
		nc, err := a.as(role).Connect(nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
		require.NoError(t, err, role)
		for i := 0; i <= limits.MaxSubscriptions; i++ {
			_, err := nc.Subscribe(fmt.Sprintf("flood.%d", i), func(*nats.Msg) {})
			require.NoError(t, err)
		}
		require.NoError(t, nc.Flush())
		select {
		case err := <-errs:
			require.ErrorContains(t, err, "maximum subscriptions exceeded", role)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: subscription %d accepted", role, limits.MaxSubscriptions+1)
		}
		nc.Close()
	}

	// Connections: the worker's account holds its bound, no more.
	var conns []*nats.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < WorkerLimits.MaxConnections; i++ {
		nc, err := a.as("executor-demo").Connect(nats.MaxReconnects(0))
		require.NoError(t, err, "connection %d", i+1)
		conns = append(conns, nc)
	}
	_, err := a.as("executor-demo").Connect(nats.MaxReconnects(0))
	require.Error(t, err, "connection past the account's bound")
	require.ErrorContains(t, err, "maximum account active connections exceeded")

	// sagad, in its own account, is untouched: a capsule still completes.
	for nc, only := range map[*nats.Conn]string{conns[0]: "execute", a.conn("reviewer-demo-reviewer"): "review"} {
		svc, err := worker.Serve(nc, worker.Config{Only: only})
		require.NoError(t, err)
		t.Cleanup(func() { _ = svc.Stop() })
	}
	doc := capsuletest.New().Set("task.kind", "demo").Set("target", "file:t2.md").Set("constraints.resource_locks_required", []any{"t2.md"})
	a.publish(RoleProducer, doc)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
}
