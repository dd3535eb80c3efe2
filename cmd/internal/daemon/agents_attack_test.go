package daemon

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/examples/agents/demo"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/agenttest"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// The tests of this file run agents speaking the Agent Protocol for NATS
// against sagad's embedded server, each host logged in with the seed
// sagad wrote for its role, the way a stock host would: default inbox
// prefix, the protocol's own subjects. Then agents play attackers with
// their own credentials.

// agentConfig has two agent executors (one named by subject, one found by
// discovery) and an agent reviewer.
const agentConfig = `{
  "executors": {
    "writer": {"type": "agent", "subject": "agents.prompt.writer.alice.main", "timeout": "20s", "idle_timeout": "10s"},
    "other":  {"type": "agent", "agent": "other", "timeout": "20s"}
  },
  "reviewers": {
    "judge": {"type": "agent", "subject": "agents.prompt.judge.alice.main", "timeout": "20s"}
  }
}`

// host starts an agent host as role.
func (a *arena) host(role string, cfg agenttest.Config) *agenttest.Host {
	a.t.Helper()
	nc := a.conn(role)
	h, err := agenttest.Start(nc, cfg)
	require.NoError(a.t, err)
	a.t.Cleanup(h.Stop)
	require.NoError(a.t, nc.Flush())
	return h
}

// approve answers every review with APPROVED and the usage it reports.
func approve(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
	s.Ack()
	s.Usage(100, 10)
	s.Text("```json\n{\"verdict\": \"APPROVED\", \"findings\": []}\n```")
}

// TestAgentsThroughAccounts: stock hosts with their roles' seeds serve a
// capsule end to end; their streamed replies, heartbeats and discovery
// answers cross into sagad's account, and an answer sagad publishes for a
// query reaches the asking agent's inbox.
func TestAgentsThroughAccounts(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	writer := a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Heartbeat: 200 * time.Millisecond, Handler: func(ctx context.Context, req agenttest.Request, s *agenttest.Stream) {
		agenttest.Echo(ctx, req, s)
		s.Cost(0.2)
	}})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})
	other := a.host("executor-other", agenttest.Config{Agent: "other", Owner: "bob", Session: "s1"})

	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	require.Equal(t, 1, writer.Calls())

	// Discovery, by agent name, picks the instance in its own account.
	doc2 := capsuletest.New().Set("task.kind", "other").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc2)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc2.ID()))
	require.Equal(t, 1, other.Calls())

	// The directory sagad builds hears each role's heartbeats and
	// discovery through its own imports.
	reg, err := executors.Config{Executors: map[string]executors.Endpoint{
		"writer": {Type: "agent", Subject: "agents.prompt.writer.alice.main"},
		"other":  {Type: "agent", Agent: "other"},
	}, AgentAccounts: true}.Build(a.sagad)
	require.NoError(t, err)
	t.Cleanup(reg.AgentDirectory().Stop)
	natstest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		insts, err := reg.AgentDirectory().List(context.Background())
		if err != nil || len(insts) != 2 {
			return false
		}
		return insts[0].Source == "executor-other" && insts[1].Source == "executor-writer" && insts[1].Alive
	}, "both agents listed, each through its role's imports")
}

// answerer is a CallObserver that answers every query on its reply
// subject, as the pause/answer side does with sagad's connection.
type answerer struct {
	nc     *nats.Conn
	answer string
	mu     sync.Mutex
	asked  []executors.AgentQuery
}

func (o *answerer) Progress(executors.CallProgress) {}
func (o *answerer) Query(q executors.AgentQuery) {
	o.mu.Lock()
	o.asked = append(o.asked, q)
	o.mu.Unlock()
	_ = o.nc.Publish(q.ReplySubject, []byte(o.answer))
}

// TestAgentQueryAcrossAccounts: a stock host's query names its own
// _INBOX; sagad answers through its import of that role's inbox space.
func TestAgentQueryAcrossAccounts(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		ans, ok := s.Ask(ctx, "q1", "Which color?")
		if !ok {
			s.Error(408, "no answer")
			return
		}
		s.Text("Painting it " + ans)
	}})
	reg, err := executors.Config{Executors: map[string]executors.Endpoint{
		"writer": {Type: "agent", Subject: "agents.prompt.writer.alice.main", Timeout: "10s"},
	}, AgentAccounts: true}.Build(a.sagad)
	require.NoError(t, err)
	t.Cleanup(reg.AgentDirectory().Stop)
	ex, err := reg.Executor("writer")
	require.NoError(t, err)
	obs := &answerer{nc: a.sagad, answer: "blue"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := ex.Execute(executors.WithObserver(ctx, obs), agentRequest(t, "writer"))
	require.NoError(t, err)
	require.Equal(t, "Painting it blue", executors.ArtifactText(res.Content))
	require.Len(t, obs.asked, 1)
	require.True(t, strings.HasPrefix(obs.asked[0].ReplySubject, "saga.answer.executor-writer._INBOX.") ||
		strings.HasPrefix(obs.asked[0].ReplySubject, "saga.answer.executor-writer."), obs.asked[0].ReplySubject)
}

func agentRequest(t *testing.T, kind string) executors.Request {
	t.Helper()
	doc := capsuletest.New().Set("task.kind", kind)
	c := new(capsule.Capsule)
	require.NoError(t, json.Unmarshal(doc.Sealed(t), c))
	return executors.Request{Capsule: c, Cycle: 1, IdempotencyKey: c.CapsuleID + "/1"}
}

// TestAgentCannotServeAnothersPrompt: the agent of kind "other", with its
// own seed, registers as the writer (same agent, owner, session, queue
// group) while the real writer is down. sagad's calls to the writer never
// reach it: the capsule fails on "no responders" and the impostor saw
// nothing.
func TestAgentCannotServeAnothersPrompt(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	impostor := a.host("executor-other", agenttest.Config{Agent: "writer", Owner: "alice"})
	raw := a.conn("executor-other")
	sniffed, err := raw.SubscribeSync("agents.>")
	require.NoError(t, err)
	require.NoError(t, raw.Flush())
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})

	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	require.Equal(t, capsule.Halted, a.awaitEnd(doc.ID()))
	require.Zero(t, impostor.Calls(), "the impostor served the writer's prompt")
	var cp capsule.Checkpoint
	require.NoError(t, json.Unmarshal(a.checkpoint(doc.ID()).Value(), &cp))
	require.Contains(t, cp.State.HaltReason, "no responders on agents.prompt.writer.alice.main")
	for {
		m, err := sniffed.NextMsg(0)
		if err != nil {
			break
		}
		require.False(t, strings.HasPrefix(m.Subject, "agents.prompt."), "the impostor's account saw %s", m.Subject)
	}
}

// TestForgedQueryAnswer: while the writer waits for an answer on its
// _INBOX, the agent "other" publishes a forged answer on that subject in
// its own account and on sagad's import of the writer's inboxes, and
// asks a question of its own naming the writer's inbox as its reply
// subject, which sagad answers. The writer's first answer is still the
// one sagad gave it; the one for "other" lands in other's own account.
func TestForgedQueryAnswer(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	writerNC, otherNC := a.conn("executor-writer"), a.conn("executor-other")
	inbox := writerNC.NewInbox()
	writerSub, err := writerNC.SubscribeSync(inbox)
	require.NoError(t, err)
	require.NoError(t, writerNC.Flush())
	// other's own subscription on the same subject name, in its account.
	otherSub, err := otherNC.SubscribeSync(inbox)
	require.NoError(t, err)
	require.NoError(t, otherNC.Flush())

	otherHost, err := agenttest.Start(otherNC, agenttest.Config{Agent: "other", Owner: "bob", Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		s.Raw([]byte(`{"type":"query","data":{"id":"q","reply_subject":"` + inbox + `","prompt":"send me the writer's answer"}}`))
		s.Text("done")
	}})
	require.NoError(t, err)
	t.Cleanup(otherHost.Stop)
	require.NoError(t, otherNC.Flush())

	// The forgeries, with other's credentials.
	require.NoError(t, otherNC.Publish(inbox, []byte("forged in other's account")))
	rest := strings.TrimPrefix(inbox, "_INBOX.")
	require.NoError(t, otherNC.Publish(executors.AgentAnswerPrefix("executor-writer")+"."+rest, []byte("forged on sagad's import")))
	require.NoError(t, otherNC.Flush())

	// sagad answers other's question, which names the writer's inbox.
	reg, err := executors.Config{Executors: map[string]executors.Endpoint{
		"other": {Type: "agent", Agent: "other", Timeout: "10s"},
	}, AgentAccounts: true}.Build(a.sagad)
	require.NoError(t, err)
	t.Cleanup(reg.AgentDirectory().Stop)
	ex, err := reg.Executor("other")
	require.NoError(t, err)
	obs := &answerer{nc: a.sagad, answer: "for other"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = ex.Execute(executors.WithObserver(ctx, obs), agentRequest(t, "other"))
	require.NoError(t, err)
	m, err := otherSub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "forged in other's account", string(m.Data))
	m, err = otherSub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "for other", string(m.Data), "sagad's answer to other lands in other's account")

	// sagad's answer to the writer, through the writer's import.
	require.NoError(t, a.sagad.Publish(executors.AgentAnswerPrefix("executor-writer")+"."+rest, []byte("legit")))
	require.NoError(t, a.sagad.Flush())
	m, err = writerSub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "legit", string(m.Data), "the writer's first answer is sagad's, no forgery")
}

// TestAgentStaysOutOfSagadsSubjects: with an agent role's seed, nothing
// of sagad's answers (intake, completions, artifacts, admin, JetStream,
// another agent's prompt, sagad's imports of other roles), and a
// heartbeat published under another agent's name never reaches sagad.
func TestAgentStaysOutOfSagadsSubjects(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Heartbeat: -1, Handler: approve})
	for _, role := range []string{"executor-writer", "executor-other"} {
		nc := a.conn(role)
		for _, subject := range []string{
			"saga.intake", "saga.intake.producer", "saga.complete.x.1", "saga.artifacts.get", "saga.admin.status",
			"$JS.API.INFO", "$KV.saga-checkpoints.x", "saga.phase.4",
			"agents.prompt.judge.alice.main", "saga.answer.reviewer-judge.x", "saga.agents.info.reviewer-judge",
		} {
			requireUnreached(t, nc, role, subject)
		}
	}

	beats, err := a.sagad.SubscribeSync("saga.hb.>")
	require.NoError(t, err)
	require.NoError(t, a.sagad.Flush())
	other := a.conn("executor-other")
	spoof := `{"agent":"writer","owner":"alice","session":"main","instance_id":"X","ts":"2026-01-01T00:00:00Z","interval_s":30}`
	require.NoError(t, other.Publish("agents.hb.writer.alice.main", []byte(spoof)))
	require.NoError(t, other.Publish("agents.hb.other.bob.s1", []byte(`{"agent":"other","owner":"bob","session":"s1","instance_id":"Y","ts":"2026-01-01T00:00:00Z","interval_s":30}`)))
	require.NoError(t, other.Flush())
	m, err := beats.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "saga.hb.executor-other.agents.hb.other.bob.s1", m.Subject, "the first beat sagad hears is other's own, under other's name")
}

// TestExampleAgents: examples/agents/sagad.json and the example's agents
// (discovered by name, each logged in with its role's seed) take a capsule
// through a revise cycle: the critic asks for an example, the author's
// second draft has one; the artifact is the author's streamed text and
// the cost it reported is charged, the critic's tokens counted.
func TestExampleAgents(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile("../../../examples/agents/sagad.json")
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(conf, &c))
	c["http_listen"] = "off"
	conf, err = json.Marshal(c)
	require.NoError(t, err)
	a := newArenaWith(t, string(conf))
	a.host(demo.AuthorRole, agenttest.Config{Agent: "author", Owner: "demo", Handler: demo.Author})
	a.host(demo.CriticRole, agenttest.Config{Agent: "critic", Owner: "demo", Handler: demo.Critic})

	doc := capsuletest.New().Set("task.kind", "author").Set("review.reviewer_agent_id", "critic").Set("review.max_cycles", 3)
	a.publish(RoleProducer, doc)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	var cp capsule.Checkpoint
	require.NoError(t, json.Unmarshal(a.checkpoint(doc.ID()).Value(), &cp))
	require.Len(t, cp.State.Reviews, 2)
	require.Equal(t, capsule.ChangesRequested, cp.State.Reviews[0].Verdict)
	require.Equal(t, capsule.Approved, cp.State.Reviews[1].Verdict)
	require.InDelta(t, 0.02, cp.State.BudgetUsed.Dollars, 1e-9, "two author turns at $0.01")
	require.True(t, cp.State.BudgetUsed.Estimated, "the author reports no tokens")
}
