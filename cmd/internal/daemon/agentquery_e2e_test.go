package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/agenttest"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
)

// The tests of this file join the two halves of agent questions: the real
// agent executor, a stock agent host logged in with its executor role's
// seed (so its reply subject is its own _INBOX, which sagad reaches through
// saga.answer.<role>.>), and the operator's side (pending, resume with an
// answer, history, status, agents) through sagad's admin service.

// operator is an admin client with the operator's seed.
func (a *arena) operator() *adminsvc.Client {
	a.t.Helper()
	return adminsvc.NewClient(a.conn(RoleOperator), adminsvc.ClientConfig{})
}

// TestAgentQueryAnsweredByOperator: the writer asks a question mid-call;
// the capsule waits in pending (agent_query, the question's text); the
// operator answers with resume; the agent receives exactly that text; the
// call goes on and the capsule completes; history names the question and
// who answered it, with the answer.
func TestAgentQueryAnsweredByOperator(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	const question, answer = "Which color, exactly?", "deep blue  (with two spaces)\nand a second line"
	var (
		mu  sync.Mutex
		got []string
	)
	writer := a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		s.Text("Thinking. ")
		ans, ok := s.Ask(ctx, "q1", question)
		if !ok {
			s.Error(408, "no answer")
			return
		}
		mu.Lock()
		got = append(got, ans)
		mu.Unlock()
		s.Text("Painting it " + strings.Fields(ans)[1])
	}})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})
	op := a.operator()

	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)

	var item admin.PendingItem
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		items, err := op.Pending(ctx)
		if err != nil {
			return false
		}
		for _, it := range items {
			if it.CapsuleID == doc.ID() {
				item = it
				return true
			}
		}
		return false
	}, "the capsule never waited in pending")
	require.Equal(t, capsule.Trigger("agent_query"), item.Trigger)
	require.NotNil(t, item.Query, "pending shows the question")
	require.Equal(t, question, item.Query.Prompt)
	require.Equal(t, "q1", item.Query.ID)
	// While it waits, status shows the call's whole stream so far (the
	// ack, the text, the question), not what was reported before.
	natstest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := op.Status(ctx, doc.ID())
		return err == nil && st.Call != nil && st.Call.Chunks == 3 && st.Call.Bytes == int64(len("Thinking. "))
	}, "status never showed the call's three chunks while the question waited")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := op.Resume(ctx, adminsvc.ResumeRequest{ID: doc.ID(), By: "carol", Answer: answer})
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	mu.Lock()
	require.Equal(t, []string{answer}, got, "the agent received exactly the operator's text")
	mu.Unlock()
	require.Equal(t, 1, writer.Calls(), "the answered call went on: no second call")

	events, err := op.AllHistory(ctx, doc.ID())
	require.NoError(t, err)
	var asked, answered bool
	for _, e := range events {
		switch e.Kind {
		case "agent_query":
			asked = true
			require.Contains(t, e.Detail, question)
			require.Equal(t, "writer.alice.main", e.By, "the question names the agent who asked")
		case "agent_query_answered":
			answered = true
			require.Equal(t, answer, e.Said)
			require.Equal(t, "carol", e.By, "history names who answered")
		}
	}
	require.True(t, asked, "history records agent_query: %+v", events)
	require.True(t, answered, "history records the answer: %+v", events)
}

// sagactl runs sagactl as the operator against the arena's sagad, the way
// an operator on sagad's host does: its URL, the operator's seed.
func (a *arena) sagactl(args ...string) (stdout string, code int) {
	a.t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"--nats-url", a.d.url, "--nats-nkey", filepath.Join(CredsDir(a.dataDir), RoleOperator+natsconn.SeedExt)}, args...)
	code = cli.Main(args, &out, &errOut)
	if code != 0 {
		a.t.Logf("sagactl %v: %d: %s", args, code, errOut.String())
	}
	return out.String(), code
}

// TestAgentsAndRunningCallThroughSagactl: sagactl agents lists a live
// stock host, logged in with its role's seed, as alive and serving its
// executor kind; sagactl status -o json, while that agent streams a slow
// answer, shows the running call with its chunks counted.
func TestAgentsAndRunningCallThroughSagactl(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	release := make(chan struct{})
	a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Heartbeat: 200 * time.Millisecond, Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-release:
				s.Text("done.")
				return
			case <-tick.C:
				s.Text("word ")
			}
		}
	}})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})

	var agents adminsvc.AgentsReply
	natstest.Eventually(t, 15*time.Second, 100*time.Millisecond, func() bool {
		out, code := a.sagactl("agents", "--wait", "300ms", "-o", "json")
		if code != 0 || json.Unmarshal([]byte(out), &agents) != nil {
			return false
		}
		for _, ag := range agents.Agents {
			if ag.Agent == "writer" && ag.Alive {
				return true
			}
		}
		return false
	}, "sagactl agents never listed the writer alive: %+v", &agents)
	for _, ag := range agents.Agents {
		if ag.Agent == "writer" {
			require.Equal(t, "alice", ag.Owner)
			require.Equal(t, "agents.prompt.writer.alice.main", ag.PromptSubject)
			require.Contains(t, ag.Serves, "executor:writer", "the writer serves its kind: %+v", ag)
		}
	}

	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	var st client.Status
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		out, code := a.sagactl("status", doc.ID(), "-o", "json")
		st = client.Status{}
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.Call != nil && st.Call.Chunks > 0 && st.Call.Bytes > 0
	}, "status never showed the running call with chunks: %+v", &st)
	require.Equal(t, "writer.alice.main", st.Call.Agent)
	require.Equal(t, "agents.prompt.writer.alice.main", st.Call.Subject)
	require.Contains(t, st.Call.Text, "word")
	close(release)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
}

// TestAgentQueryOutlivesIdleTimeout: a stock host waits for the answer to
// its question without sending anything (as Ask does); a person answers
// after the endpoint's idle_timeout has passed. The call is not timed out
// meanwhile: the agent gets the answer and the capsule completes.
func TestAgentQueryOutlivesIdleTimeout(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, `{
  "executors": {"writer": {"type": "agent", "subject": "agents.prompt.writer.alice.main", "timeout": "30s", "idle_timeout": "1s"}},
  "reviewers": {"judge": {"type": "agent", "subject": "agents.prompt.judge.alice.main", "timeout": "20s"}}
}`)
	writer := a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		ans, ok := s.Ask(ctx, "q1", "Which color?")
		if !ok {
			s.Error(408, "no answer")
			return
		}
		s.Text("Painting it " + ans)
	}})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})
	op := a.operator()
	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		items, err := op.Pending(ctx)
		return err == nil && len(items) == 1 && items[0].CapsuleID == doc.ID() && items[0].Query != nil
	}, "the question never waited in pending")
	time.Sleep(3 * time.Second) // three idle_timeouts
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := op.Resume(ctx, adminsvc.ResumeRequest{ID: doc.ID(), By: "carol", Answer: "blue"})
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	require.Equal(t, 1, writer.Calls())
}

// TestReviewerAgentQueryAnsweredWithSagactl: the reviewer agent, logged in
// with its reviewer role's seed, asks during the review; sagactl pending
// shows the question and sagactl resume --answer --by answers it (the
// answer reaches the reviewer through saga.answer.reviewer-judge.>); the
// review goes on and approves.
func TestReviewerAgentQueryAnsweredWithSagactl(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	got := make(chan string, 1)
	a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Handler: agenttest.Echo})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: func(ctx context.Context, req agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		ans, ok := s.Ask(ctx, "r1", "Is a short answer fine?")
		if !ok {
			s.Error(408, "no answer")
			return
		}
		got <- ans
		approve(ctx, req, s)
	}})
	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	natstest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		out, code := a.sagactl("pending")
		return code == 0 && strings.Contains(out, doc.ID()) && strings.Contains(out, "Is a short answer fine?")
	}, "sagactl pending never showed the reviewer's question")
	out, code := a.sagactl("resume", doc.ID(), "--answer", "yes, short is fine", "--by", "dave")
	require.Zero(t, code, out)
	select {
	case ans := <-got:
		require.Equal(t, "yes, short is fine", ans)
	case <-time.After(20 * time.Second):
		t.Fatal("the reviewer never received the answer")
	}
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	out, code = a.sagactl("history", doc.ID(), "-o", "json")
	require.Zero(t, code)
	require.Contains(t, out, `"agent_query_answered"`)
	require.Contains(t, out, `"dave"`)
}

// TestAgentTwoQuestionsInOneCall: the writer asks twice in one call; each
// question waits in pending in turn and each answer reaches it.
func TestAgentTwoQuestionsInOneCall(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		first, ok := s.Ask(ctx, "q1", "First?")
		if !ok {
			s.Error(408, "no answer")
			return
		}
		second, ok := s.Ask(ctx, "q2", "Second?")
		if !ok {
			s.Error(408, "no answer")
			return
		}
		s.Text(first + " and " + second)
	}})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})
	op := a.operator()
	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	for _, q := range []struct{ id, prompt, answer string }{{"q1", "First?", "one"}, {"q2", "Second?", "two"}} {
		natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			items, err := op.Pending(ctx)
			return err == nil && len(items) == 1 && items[0].Query != nil && items[0].Query.ID == q.id && items[0].Query.Prompt == q.prompt
		}, "question %s never waited in pending", q.id)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := op.Resume(ctx, adminsvc.ResumeRequest{ID: doc.ID(), By: "carol", Answer: q.answer})
		cancel()
		require.NoError(t, err, q.id)
	}
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
}

// TestAgentQueryLeftUnanswered: the writer asks, then finishes its answer
// without waiting for one. The capsule does not stay parked on a question
// nobody waits for: it completes, and pending is empty.
func TestAgentQueryLeftUnanswered(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		s.Raw([]byte(`{"type":"query","data":{"id":"q","reply_subject":"_INBOX.nobody.listens","prompt":"Rhetorical?"}}`))
		time.Sleep(500 * time.Millisecond)
		s.Text("Never mind, done.")
	}})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})
	op := a.operator()
	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	items, err := op.Pending(ctx)
	require.NoError(t, err)
	require.Empty(t, items)
}

// TestAgentQueryAnswerInTheRetrysPrompt: the writer asks, receives the
// answer, then fails with a retryable error; the retry's prompt, rendered
// by the adapter's default template, carries the person's answer and who
// gave it.
func TestAgentQueryAnswerInTheRetrysPrompt(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, agentConfig)
	prompts := make(chan string, 4)
	var calls atomic.Int32
	a.host("executor-writer", agenttest.Config{Agent: "writer", Owner: "alice", Handler: func(ctx context.Context, req agenttest.Request, s *agenttest.Stream) {
		prompts <- req.Envelope.Prompt
		s.Ack()
		if calls.Add(1) > 1 {
			s.Text("Licensed.")
			return
		}
		if _, ok := s.Ask(ctx, "q1", "Which license?"); !ok {
			s.Error(408, "no answer")
			return
		}
		s.Error(503, "overloaded, try again")
	}})
	a.host("reviewer-judge", agenttest.Config{Agent: "judge", Owner: "alice", Handler: approve})
	op := a.operator()
	doc := capsuletest.New().Set("task.kind", "writer").Set("review.reviewer_agent_id", "judge")
	a.publish(RoleProducer, doc)
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		items, err := op.Pending(ctx)
		return err == nil && len(items) == 1 && items[0].Query != nil
	}, "the question never waited in pending")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := op.Resume(ctx, adminsvc.ResumeRequest{ID: doc.ID(), By: "dana", Answer: "Apache-2.0"})
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	require.NotContains(t, <-prompts, "Apache-2.0", "the first call had no answer yet")
	require.Contains(t, <-prompts, "## A person's answer (dana)\nApache-2.0", "the retry carries the answer")
}
