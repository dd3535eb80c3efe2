package daemon

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
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
