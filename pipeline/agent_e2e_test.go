package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/agenttest"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
)

// TestAgentExecutorAndReviewerReviseCycle: a capsule whose executor and
// reviewer are agents speaking the Agent Protocol for NATS completes
// through a revise cycle: the reviewer agent asks for changes, the
// executor agent's second prompt carries the finding and the prior
// artifact, the reviewer approves; the streamed text is the artifact and
// the cost the agents reported is charged.
func TestAgentExecutorAndReviewerReviseCycle(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("agent-writer", executors.AgentExecutor{})
		c.Executors.RegisterReviewer("agent-judge", executors.AgentReviewer{})
	})
	nc, _ := natstest.Connect(t, f.srv)
	hostNC, _ := natstest.Connect(t, f.srv)

	var mu sync.Mutex
	var prompts []string
	writer, err := agenttest.Start(hostNC, agenttest.Config{Agent: "writer", Handler: func(_ context.Context, req agenttest.Request, s *agenttest.Stream) {
		mu.Lock()
		prompts = append(prompts, req.Envelope.Prompt)
		n := len(prompts)
		mu.Unlock()
		s.Ack()
		s.Text(fmt.Sprintf("# Draft %d\n\n", n))
		s.Unknown()
		s.TextObject("The answer.\n")
		s.Cost(0.5)
	}})
	require.NoError(t, err)
	t.Cleanup(writer.Stop)
	reviews := 0
	judge, err := agenttest.Start(hostNC, agenttest.Config{Agent: "judge", Handler: func(_ context.Context, req agenttest.Request, s *agenttest.Stream) {
		mu.Lock()
		reviews++
		n := reviews
		mu.Unlock()
		s.Ack()
		s.Usage(1000, 50)
		if n == 1 {
			s.Text("Needs a table.\n```json\n{\"verdict\":\"CHANGES_REQUESTED\",\"findings\":[{\"message\":\"add a table\",\"severity\":\"major\"}]}\n```")
			return
		}
		s.Text(`Good now. {"verdict":"APPROVED","findings":[]}`)
	}})
	require.NoError(t, err)
	t.Cleanup(judge.Stop)
	require.NoError(t, hostNC.Flush())
	f.cfg.Executors.RegisterExecutor("agent-writer", executors.AgentExecutor{AgentEndpoint: executors.AgentEndpoint{Conn: nc, Name: "agent-writer", Subject: writer.Subject(), Timeout: 10 * time.Second}})
	f.cfg.Executors.RegisterReviewer("agent-judge", executors.AgentReviewer{AgentEndpoint: executors.AgentEndpoint{Conn: nc, Name: "agent-judge", Subject: judge.Subject(), Timeout: 10 * time.Second}})

	doc := f.own(t, capsuletest.New().Set("task.kind", "agent-writer").Set("review.reviewer_agent_id", "agent-judge").Set("review.max_cycles", 3))
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)

	mu.Lock()
	require.Len(t, prompts, 2)
	second := prompts[1]
	mu.Unlock()
	require.Contains(t, second, "add a table", "the revision's prompt carries the finding")
	require.Contains(t, second, "# Draft 1", "and the prior artifact")

	cp, err := f.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Len(t, cp.State.Reviews, 2)
	a, err := f.bundle.Store.Artifacts.Get(context.Background(), cp.State.ArtifactRefs[len(cp.State.ArtifactRefs)-1])
	require.NoError(t, err)
	require.Equal(t, executors.TextMediaType, a.MediaType)
	require.Equal(t, "# Draft 2\n\nThe answer.\n", executors.ArtifactText(a.Content))

	used := cp.State.BudgetUsed
	require.InDelta(t, 1.0, used.Dollars, 1e-9, "two executor turns at $0.50")
	require.True(t, used.Estimated, "the writer reported no tokens: estimated")
	require.Greater(t, used.Tokens, int64(2*1050), "the judge's reported tokens plus the writer's estimate")
	require.True(t, s.BudgetUsed.Estimated, "status shows the estimate")
}

// TestAgentErrorFrames: an agent's 403 halts the capsule with the code and
// description as a finding; a 500 is retried under the failure policy
// (self_heal) and the next attempt's answer completes the capsule.
func TestAgentErrorFrames(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("agent-403", executors.AgentExecutor{})
		c.Executors.RegisterExecutor("agent-500", executors.AgentExecutor{})
	})
	nc, _ := natstest.Connect(t, f.srv)
	hostNC, _ := natstest.Connect(t, f.srv)
	forbidden, err := agenttest.Start(hostNC, agenttest.Config{Agent: "forbidden", Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		s.Error(403, "not allowed to touch go.mod")
	}})
	require.NoError(t, err)
	t.Cleanup(forbidden.Stop)
	var mu sync.Mutex
	calls := 0
	flaky, err := agenttest.Start(hostNC, agenttest.Config{Agent: "flaky", Handler: func(_ context.Context, req agenttest.Request, s *agenttest.Stream) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		s.Ack()
		if n == 1 {
			s.Error(500, "overloaded")
			return
		}
		agenttest.Echo(context.Background(), req, s)
	}})
	require.NoError(t, err)
	t.Cleanup(flaky.Stop)
	require.NoError(t, hostNC.Flush())
	f.cfg.Executors.RegisterExecutor("agent-403", executors.AgentExecutor{AgentEndpoint: executors.AgentEndpoint{Conn: nc, Name: "agent-403", Subject: forbidden.Subject()}})
	f.cfg.Executors.RegisterExecutor("agent-500", executors.AgentExecutor{AgentEndpoint: executors.AgentEndpoint{Conn: nc, Name: "agent-500", Subject: flaky.Subject()}})

	halts := f.own(t, capsuletest.New().Set("task.kind", "agent-403"))
	f.publish(t, halts.Sealed(t))
	s := f.wait(t, halts.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Contains(t, s.HaltReason, "executor_failed:agent executor \"agent-403\": agent error 403: not allowed to touch go.mod")
	require.Equal(t, 1, forbidden.Calls(), "a 403 is not retried")
	cp, err := f.client.Checkpoint(context.Background(), halts.ID())
	require.NoError(t, err)
	require.NotEmpty(t, cp.State.Findings)
	require.Contains(t, cp.State.Findings[len(cp.State.Findings)-1].Message, "agent error 403: not allowed to touch go.mod")

	retried := f.own(t, capsuletest.New().Set("task.kind", "agent-500"))
	f.publish(t, retried.Sealed(t))
	s = f.wait(t, retried.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	mu.Lock()
	require.Equal(t, 2, calls)
	mu.Unlock()
}

// TestAgentCallCancelled: a capsule cancelled while its agent streams
// keep-alives ends cancelled at once; sagad stops reading the stream
// (there is no cancel on the wire) instead of waiting for the call's
// idle_timeout or ceiling, and the agent is not called again.
func TestAgentCallCancelled(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("agent-slow", executors.AgentExecutor{})
	})
	nc, _ := natstest.Connect(t, f.srv)
	hostNC, _ := natstest.Connect(t, f.srv)
	slow, err := agenttest.Start(hostNC, agenttest.Config{Agent: "slow", Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			s.Ack()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}})
	require.NoError(t, err)
	t.Cleanup(slow.Stop)
	require.NoError(t, hostNC.Flush())
	f.cfg.Executors.RegisterExecutor("agent-slow", executors.AgentExecutor{AgentEndpoint: executors.AgentEndpoint{Conn: nc, Name: "agent-slow", Subject: slow.Subject(), Timeout: time.Minute, IdleTimeout: time.Minute}})

	doc := f.own(t, capsuletest.New().Set("task.kind", "agent-slow"))
	f.publish(t, doc.Sealed(t))
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return slow.Calls() == 1 }, "the agent is called")
	start := time.Now()
	_, err = f.admin(t).Cancel(context.Background(), doc.ID(), "not needed", "ann")
	require.NoError(t, err)
	s := f.waitState(t, doc.ID(), capsule.Cancelled)
	require.Equal(t, capsule.Cancelled, s.State)
	require.Less(t, time.Since(start), 30*time.Second, "not left to the call's minute-long timeouts")
	f.bundle.WaitDrained(t)
	require.Equal(t, 1, slow.Calls(), "the agent is not called again")
}
