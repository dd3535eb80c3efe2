package phases_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
)

// scriptedAgent answers its calls from a script, as an executor and as a
// reviewer: a nil entry is a success. It keeps every request's key and
// previous failure.
type scriptedAgent struct {
	mu     sync.Mutex
	script []error
	keys   []string
	prev   []*executors.PreviousFailure
}

func (s *scriptedAgent) next(key string, prev *executors.PreviousFailure) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, key)
	s.prev = append(s.prev, prev)
	if len(s.script) == 0 {
		return fmt.Errorf("call %d is past the script", len(s.keys))
	}
	err := s.script[0]
	s.script = s.script[1:]
	return err
}

func (s *scriptedAgent) Execute(_ context.Context, req executors.Request) (executors.Result, error) {
	if err := s.next(req.IdempotencyKey, req.PreviousFailure); err != nil {
		return executors.Result{}, err
	}
	return executors.Result{MediaType: "application/json", Content: json.RawMessage(`{"summary":"done"}`), Usage: capsule.Usage{Tokens: 7}}, nil
}

func (s *scriptedAgent) Review(_ context.Context, req executors.ReviewRequest) (executors.ReviewResult, error) {
	if err := s.next(req.IdempotencyKey, req.PreviousFailure); err != nil {
		return executors.ReviewResult{}, err
	}
	return executors.ReviewResult{Verdict: capsule.Approved, Usage: capsule.Usage{Tokens: 7}}, nil
}

// TestFailurePolicyBothPhases: EXECUTION's executor and REVIEW's reviewer
// go through the same failure policy, in the same order: a failed attempt
// is charged under its own id, the policy decides, the attempt is recorded
// when the policy goes on, then the phase halts, pauses or calls again. A
// policy that halts halts executor_failed even over a cap, and a phase that
// cannot record an attempt never retries.
func TestFailurePolicyBothPhases(t *testing.T) {
	t.Parallel()
	fail := func(exit int, tokens int64) error {
		return &executors.FailedError{Detail: fmt.Sprintf("exit %d", exit), ExitCode: exit, Usage: capsule.Usage{Tokens: tokens}}
	}
	tests := []struct {
		name     string
		script   []error
		exceeded string
		noRecord bool
		want     phases.Action
		// wantHalt is the halt reason; {prefix} stands for the reviewer's.
		wantHalt     func(prefix string) string
		wantCharges  []int64 // tokens charged per attempt, attempt 1 first
		wantRecorded []int   // attempts recorded through the machine
	}{
		{
			name: "self-heal then success", script: []error{fail(12, 10), nil},
			want: phases.Advance, wantCharges: []int64{10, 7}, wantRecorded: []int{1},
		},
		{
			name: "retries exhausted halt", script: []error{fail(1, 10), fail(1, 20)},
			want:        phases.Halt,
			wantHalt:    func(p string) string { return capsule.ExecutorFailed(p + "exit 1").String() },
			wantCharges: []int64{10, 20}, wantRecorded: []int{1},
		},
		{
			name: "escalation pauses", script: []error{fail(11, 5)},
			want: phases.Park, wantCharges: []int64{5}, wantRecorded: []int{1},
		},
		{
			name: "a crossed cap halts instead of retrying", script: []error{fail(12, 10)}, exceeded: "tokens",
			want:        phases.Halt,
			wantHalt:    func(string) string { return capsule.BudgetExceeded("tokens").String() },
			wantCharges: []int64{10},
		},
		{
			name: "a halting failure halts executor_failed over a cap", script: []error{fail(2, 10)}, exceeded: "tokens",
			want:        phases.Halt,
			wantHalt:    func(p string) string { return capsule.ExecutorFailed(p + "exit 2").String() },
			wantCharges: []int64{10},
		},
		{
			name: "no retry without a way to record the attempt", script: []error{fail(12, 10)}, exceeded: "tokens", noRecord: true,
			want:        phases.Halt,
			wantHalt:    func(p string) string { return capsule.ExecutorFailed(p + "exit 12").String() },
			wantCharges: []int64{10},
		},
	}
	for _, review := range []bool{false, true} {
		name, kind, prefix, recordPhase := "EXECUTION", "exec", "", capsule.Phase(0)
		if review {
			name, kind, prefix, recordPhase = "REVIEW", "review", "reviewer: ", capsule.ReviewPhase
		}
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.budgets.exceeded = tt.exceeded
				agent := &scriptedAgent{script: tt.script}
				doc := newDoc()
				var in *phases.Input
				if review {
					b.registry.RegisterReviewer(executors.StubReviewerID, agent)
					in = reviewInput(t, b, doc.Sealed(t), 1, "agent-coder-1")
				} else {
					b.registry.RegisterExecutor(executors.StubKind, agent)
					in = execInput(t, doc.Sealed(t), 1)
				}
				var recorded []machine.RecordAttempt
				if !tt.noRecord {
					in.RecordAttempt = func(_ context.Context, ev machine.RecordAttempt) error {
						recorded = append(recorded, ev)
						return nil
					}
				}
				var d phases.Decision
				if review {
					d = phases.Review{}.Run(context.Background(), b.env, in)
				} else {
					d = phases.Execution{}.Run(context.Background(), b.env, in)
				}
				require.Equal(t, tt.want, d.Action, "%s %s", d.Halt, d.Reason)
				if tt.wantHalt != nil {
					require.Equal(t, tt.wantHalt(prefix), d.Halt.String())
				}
				if tt.want == phases.Park {
					require.Equal(t, capsule.TriggerBlockedExternal, d.Trigger)
				}
				if tt.want == phases.Halt && strings.HasPrefix(d.Halt.String(), "executor_failed") {
					// The call the halt ends on is recorded with its exit
					// code, which the halt reason does not carry.
					agentName := "executor"
					if review {
						agentName = "reviewer"
					}
					require.Len(t, d.Findings, 1)
					require.Equal(t, agentName, d.Findings[0].Field)
					require.Regexp(t, `^attempt \d+ exited \d+: exit \d+$`, d.Findings[0].Message)
				}
				require.Empty(t, agent.script, "every scripted call is made")

				var total capsule.Usage
				for i, c := range b.budgets.charges {
					id := fmt.Sprintf("%s/1/%s", doc.ID(), kind)
					key := phases.AttemptKey(doc.ID(), 1, i+1)
					if i > 0 {
						id += fmt.Sprintf("/a%d", i+1)
						require.Equal(t, i, agent.prev[i].Attempt, "attempt %d carries the failure before it", i+1)
					} else {
						require.Nil(t, agent.prev[i], "a first attempt has no previous failure")
					}
					require.Equal(t, id, c.chargeID, "attempt %d is charged under its own id", i+1)
					require.Equal(t, key, agent.keys[i])
					require.Equal(t, tt.wantCharges[i], c.usage.Tokens)
					total = total.Add(c.usage)
				}
				require.Len(t, b.budgets.charges, len(tt.wantCharges))

				var got []int
				for _, ev := range recorded {
					got = append(got, ev.Attempt)
					require.Equal(t, recordPhase, ev.Phase)
					require.Equal(t, 1, ev.Cycle)
					require.Equal(t, b.budgets.charges[ev.Attempt-1].usage.Tokens, ev.BudgetUsed.Tokens-sumBefore(b.budgets.charges, ev.Attempt-1),
						"an attempt is recorded with the budget its charge left")
				}
				require.Equal(t, tt.wantRecorded, got)
				if tt.want == phases.Halt {
					require.NotNil(t, d.Record)
					require.Equal(t, total, *d.Record.BudgetUsed, "a halt records what the calls used")
				}
			})
		}
	}
}

// sumBefore is the tokens of the first n charges.
func sumBefore(cs []charge, n int) int64 {
	var s int64
	for _, c := range cs[:n] {
		s += c.usage.Tokens
	}
	return s
}

// lateAgent is a scripted agent after whose calls the clock has moved on
// by step: a call that takes longer than the time left.
type lateAgent struct {
	*scriptedAgent
	clock *atomic.Pointer[time.Time]
	step  time.Duration
}

func (a lateAgent) pass() { t := a.clock.Load().Add(a.step); a.clock.Store(&t) }

func (a lateAgent) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	defer a.pass()
	return a.scriptedAgent.Execute(ctx, req)
}

func (a lateAgent) Review(ctx context.Context, req executors.ReviewRequest) (executors.ReviewResult, error) {
	defer a.pass()
	return a.scriptedAgent.Review(ctx, req)
}

// TestNoAttemptAfterDeadline: EXECUTION and REVIEW check the capsule's
// deadline (in force: an operator's override counts) before every attempt
// of their failure policy: a phase that starts late halts
// deadline_exceeded:<phase> without a call, and a retry that would start
// after the deadline is not made.
func TestNoAttemptAfterDeadline(t *testing.T) {
	t.Parallel()
	fail := &executors.FailedError{Detail: "exit 12", ExitCode: 12, Usage: capsule.Usage{Tokens: 10}}
	for _, review := range []bool{false, true} {
		phase := capsule.Execution
		if review {
			phase = capsule.ReviewPhase
		}
		for _, tt := range []struct {
			name      string
			start     time.Duration // the clock, from the fixed now
			step      time.Duration // how long each call takes
			override  time.Duration // an operator's deadline, from now (0: none)
			script    []error
			wantCalls int
			wantHalt  bool
		}{
			{name: "late start", start: 2 * time.Hour, wantHalt: true},
			{name: "retry after the deadline", step: 2 * time.Hour, script: []error{fail}, wantCalls: 1, wantHalt: true},
			{name: "retry before the deadline", step: time.Minute, script: []error{fail, nil}, wantCalls: 2},
			{name: "an extended deadline counts", start: 2 * time.Hour, override: 3 * time.Hour, script: []error{nil}, wantCalls: 1},
		} {
			t.Run(phase.String()+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				clock := new(atomic.Pointer[time.Time])
				start := now.Add(tt.start)
				clock.Store(&start)
				b.env.Now = func() time.Time { return *clock.Load() }
				agent := lateAgent{scriptedAgent: &scriptedAgent{script: tt.script}, clock: clock, step: tt.step}
				var in *phases.Input
				if review {
					b.registry.RegisterReviewer(executors.StubReviewerID, agent)
					in = reviewInput(t, b, newDoc().Sealed(t), 1, "agent-coder-1")
				} else {
					b.registry.RegisterExecutor(executors.StubKind, agent)
					in = execInput(t, newDoc().Sealed(t), 1)
				}
				if tt.override != 0 {
					d := now.Add(tt.override)
					in.Checkpoint.State.Overrides = &capsule.Overrides{Deadline: &d}
				}
				in.RecordAttempt = func(context.Context, machine.RecordAttempt) error { return nil }
				var d phases.Decision
				if review {
					d = phases.Review{}.Run(context.Background(), b.env, in)
				} else {
					d = phases.Execution{}.Run(context.Background(), b.env, in)
				}
				require.Len(t, agent.keys, tt.wantCalls)
				if !tt.wantHalt {
					require.Equal(t, phases.Advance, d.Action, "%s %s", d.Halt, d.Reason)
					return
				}
				require.Equal(t, phases.Halt, d.Action)
				require.Equal(t, capsule.DeadlineExceeded(phase).String(), d.Halt.String())
				require.NotNil(t, d.Record, "a halt records what the calls used")
				require.Equal(t, int64(10*tt.wantCalls), d.Record.BudgetUsed.Tokens)
			})
		}
	}
}
