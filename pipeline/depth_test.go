package pipeline_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// delegateCall is one call of the delegating executor: the capsule it
// serves, its call token, and how to end it.
type delegateCall struct {
	id, token string
	done      chan capsule.Usage
}

// delegating is an executor that hands each call to the test and holds it
// in flight until the test ends it with the usage to report: the window a
// worker publishes its child capsules in.
type delegating struct{ calls chan delegateCall }

func (d delegating) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	c := delegateCall{id: req.Capsule.CapsuleID, token: req.CallToken, done: make(chan capsule.Usage, 1)}
	select {
	case d.calls <- c:
	case <-ctx.Done():
		return executors.Result{}, ctx.Err()
	}
	select {
	case u := <-c.done:
		return executors.Result{Content: []byte(`{"ok":true}`), MediaType: "application/json", Usage: u}, nil
	case <-ctx.Done():
		return executors.Result{}, ctx.Err()
	}
}

type depthFixture struct {
	*fixture
	calls chan delegateCall
}

func setupDepth(t *testing.T, maxDepth int, change ...func(*pipeline.Config)) depthFixture {
	t.Helper()
	calls := make(chan delegateCall, 16)
	f := setupWith(t, func(c *pipeline.Config) {
		c.Workers = 8 // every delegate of a chain is in EXECUTION at once
		c.MaxDepth = maxDepth
		c.Executors.RegisterExecutor("delegate", delegating{calls: calls})
		for _, ch := range change {
			ch(c)
		}
	})
	return depthFixture{fixture: f, calls: calls}
}

// next is the next delegate call, which must serve capsule id.
func (f depthFixture) next(t *testing.T, id string) delegateCall {
	t.Helper()
	select {
	case c := <-f.calls:
		require.Equal(t, id, c.id)
		require.Len(t, c.token, 64, "every executor call carries a call token")
		return c
	case <-time.After(20 * time.Second):
		cp, _, err := f.bundle.Store.Checkpoints.Get(context.Background(), id)
		if err == nil {
			t.Fatalf("no executor call for %s: %s %s %s", id, cp.State.Status, cp.State.PhaseName, cp.State.HaltReason)
		}
		t.Fatalf("no executor call for %s: %v", id, err)
		return delegateCall{}
	}
}

// publishChild publishes d as a worker serving a call would: with the
// call's token in the Saga-Parent-Token header (none when token is "").
func (f depthFixture) publishChild(t *testing.T, d capsuletest.Doc, token string) uint64 {
	t.Helper()
	m := nats.NewMsg(store.IntakeSubject)
	m.Data = d.Sealed(t)
	if token != "" {
		m.Header.Set(store.HeaderParentToken, token)
	}
	ack, err := f.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	return ack.Sequence
}

func (f depthFixture) delegate(t *testing.T, parent string) capsuletest.Doc {
	d := f.own(t, capsuletest.New().Set("task.kind", "delegate"))
	if parent != "" {
		d = d.Set("parent_capsule_id", parent)
	}
	return d
}

// TestDepthChildLinkedAndCharged: a child published with the token of its
// parent's call in flight records parent and depth, is listed as the
// parent's child, and its spend is charged to the parent once; the
// parent's own charge then counts it, and crosses its cap.
func TestDepthChildLinkedAndCharged(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0)
	ctx := context.Background()

	root := f.delegate(t, "").Set("budget.tokens", 1000)
	f.publish(t, root.Sealed(t))
	rc := f.next(t, root.ID())

	child := f.delegate(t, root.ID()).Set("budget.tokens", 1000)
	f.publishChild(t, child, rc.token)
	cc := f.next(t, child.ID())
	cp := f.bundle.WaitCheckpoint(t, child.ID(), func(*capsule.Checkpoint) bool { return true })
	require.Equal(t, root.ID(), cp.Parent)
	require.Equal(t, 1, cp.Depth)

	// The same bytes again (a worker retrying its publish) start nothing
	// and link nothing twice; a second delivery of the child's EXECUTION
	// message charges nothing twice.
	f.publishChild(t, child, rc.token)
	m := nats.NewMsg("saga.phase.4")
	m.Data = child.Sealed(t)
	m.Header.Set(store.HeaderKey, child.ID())
	m.Header.Set(store.HeaderCycle, "1")
	_, err := f.js.PublishMsg(ctx, m)
	require.NoError(t, err)

	cc.done <- capsule.Usage{Tokens: 600, Dollars: 0.5}
	s := f.wait(t, child.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)

	// The parent spends 600 itself: with its child's 600 it crosses its 1000.
	rc.done <- capsule.Usage{Tokens: 600}
	s = f.wait(t, root.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.BudgetExceeded(capsule.BudgetTokens).String(), s.HaltReason)
	waitDrained(t, f.fixture) // the second delivery too

	fam, ok, err := f.bundle.Store.Budgets.FamilyOf(ctx, root.ID())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{child.ID()}, fam.Children)
	require.Equal(t, int64(1000), fam.Caps.Tokens)
	ccp, _, err := f.bundle.Store.Checkpoints.Get(ctx, child.ID())
	require.NoError(t, err)
	require.Equal(t, ccp.State.BudgetUsed, fam.Used, "the child's spend, charged to the parent once")

	// sagactl status shows both ends of the link.
	a := f.admin(t)
	rs, err := a.Status(ctx, root.ID())
	require.NoError(t, err)
	require.Equal(t, []string{child.ID()}, rs.Children)
	require.Equal(t, &fam.Used, rs.ChildrenUsed)
	require.Empty(t, rs.Parent)
	cs, err := a.Status(ctx, child.ID())
	require.NoError(t, err)
	require.Equal(t, root.ID(), cs.Parent)
	require.Equal(t, 1, cs.Depth)
	require.Empty(t, cs.Children)
}

// TestDepthChildOverParentCapHalts: a child whose caps do not fit what
// its parent's caps have left halts budget_exceeded:parent_tokens before
// any call, whatever its own cap; one that fits runs, and a child whose
// spend still takes its parent past its cap (its call crossed its own cap)
// halts budget_exceeded:parent_tokens after its charge.
func TestDepthChildOverParentCapHalts(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0)
	root := f.delegate(t, "").Set("budget.tokens", 1000)
	f.publish(t, root.Sealed(t))
	rc := f.next(t, root.ID())
	big := f.delegate(t, root.ID()).Set("budget.tokens", 50000)
	f.publishChild(t, big, rc.token)
	s := f.wait(t, big.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.BudgetExceeded(capsule.BudgetParentTokens).String(), s.HaltReason)
	require.Equal(t, int(capsule.AutomatedGates), s.Phase, "before any call")
	require.NotEmpty(t, s.Findings)
	require.Equal(t, "parent_capsule_id", s.Findings[0].Field)
	require.Contains(t, s.Findings[0].Message, "has 1000 of 1000 tokens")

	child := f.delegate(t, root.ID()).Set("budget.tokens", 1000)
	f.publishChild(t, child, rc.token)
	f.next(t, child.ID()).done <- capsule.Usage{Tokens: 2000}
	s = f.wait(t, child.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.BudgetExceeded(capsule.BudgetTokens).String(), s.HaltReason, "its own cap is crossed first")
	rc.done <- capsule.Usage{}
}

// TestDepthParentTokenRequired: a capsule naming a parent without the
// token of a call that parent has in flight (none, a wrong one, or the
// right one after the call ended) halts parent_refused and takes no id.
func TestDepthParentTokenRequired(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0)
	ctx := context.Background()
	root := f.delegate(t, "")
	f.publish(t, root.Sealed(t))
	rc := f.next(t, root.ID())

	refused := func(token string) {
		t.Helper()
		d := f.delegate(t, root.ID())
		seq := f.publishChild(t, d, token)
		cp := f.bundle.WaitCheckpoint(t, "x-"+strconv.FormatUint(seq, 10), func(cp *capsule.Checkpoint) bool { return cp.Terminal() })
		require.Equal(t, capsule.ParentRefused(root.ID()).String(), cp.State.HaltReason)
		require.Empty(t, cp.Parent)
		_, _, err := f.bundle.Store.Checkpoints.Get(ctx, d.ID())
		require.ErrorIs(t, err, store.ErrNotFound, "the id stays free")
	}
	refused("")
	refused(string(make([]byte, 64)))
	// One digit off: the last one changed (a fixed "0" was the right token
	// one time in sixteen).
	last := "0"
	if rc.token[63] == '0' {
		last = "1"
	}
	refused(rc.token[:63] + last)

	rc.done <- capsule.Usage{}
	require.Equal(t, capsule.Completed, f.wait(t, root.ID()).State)
	refused(rc.token) // the call ended: its token is spent
	_, ok, err := f.bundle.Store.Budgets.FamilyOf(ctx, root.ID())
	require.NoError(t, err)
	require.False(t, ok, "no child was linked")
}

// TestDepthExceeded: with --max-depth 4, delegation nests four deep and
// the fifth halts depth_exceeded:5.
func TestDepthExceeded(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 4)
	ctx := context.Background()
	d := f.delegate(t, "")
	f.publish(t, d.Sealed(t))
	calls := []delegateCall{f.next(t, d.ID())}
	ids := []string{d.ID()}
	for depth := 1; depth <= 4; depth++ {
		// Each child's caps leave its parent room for its own spend.
		d = f.delegate(t, d.ID()).Set("budget.tokens", 10000-1000*depth)
		f.publishChild(t, d, calls[len(calls)-1].token)
		calls = append(calls, f.next(t, d.ID()))
		ids = append(ids, d.ID())
		cp, _, err := f.bundle.Store.Checkpoints.Get(ctx, d.ID())
		require.NoError(t, err)
		require.Equal(t, depth, cp.Depth)
	}
	fifth := f.delegate(t, d.ID())
	seq := f.publishChild(t, fifth, calls[len(calls)-1].token)
	cp := f.bundle.WaitCheckpoint(t, "x-"+strconv.FormatUint(seq, 10), func(cp *capsule.Checkpoint) bool { return cp.Terminal() })
	require.Equal(t, "depth_exceeded:5", cp.State.HaltReason)
	for i := len(calls) - 1; i >= 0; i-- {
		calls[i].done <- capsule.Usage{Tokens: 10}
		require.Equal(t, capsule.Completed, f.wait(t, ids[i]).State)
	}
	// Each ancestor was charged every descendant's spend once.
	for i := range len(ids) - 1 {
		fam, ok, err := f.bundle.Store.Budgets.FamilyOf(ctx, ids[i])
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []string{ids[i+1]}, fam.Children)
		var want int64
		for _, id := range ids[i+1:] {
			c, _, err := f.bundle.Store.Checkpoints.Get(ctx, id)
			require.NoError(t, err)
			want += c.State.BudgetUsed.Tokens
		}
		require.Equal(t, want, fam.Used.Tokens, "ancestor %d", i)
	}
}

// TestDepthAcceptedWorkDelegates: a worker that answered "accepted"
// delegates with the call's completion token while sagad awaits its
// result; the child is linked and charged to the parent.
func TestDepthAcceptedWorkDelegates(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0)
	ctx := context.Background()
	root := f.own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.publish(t, root.Sealed(t))
	f.waitState(t, root.ID(), capsule.Paused)
	tok := f.acceptedToken.Load()
	require.NotNil(t, tok)

	child := f.own(t, capsuletest.New().Set("parent_capsule_id", root.ID()))
	f.publishChild(t, child, *tok)
	s := f.wait(t, child.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	require.Equal(t, root.ID(), s.Parent)
	fam, ok, err := f.bundle.Store.Budgets.FamilyOf(ctx, root.ID())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{child.ID()}, fam.Children)
	require.Equal(t, s.BudgetUsed, fam.Used)
}

// TestDepthChildInheritsDeadline: a child whose deadline is later than its
// parent's runs under its parent's (the deadline in force, recorded among
// its checkpoint's overrides); one whose deadline is earlier keeps its own.
func TestDepthChildInheritsDeadline(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0)
	ctx := context.Background()
	root := f.delegate(t, "")
	var rc capsule.Capsule
	require.NoError(t, json.Unmarshal(root.Sealed(t), &rc))
	f.publish(t, root.Sealed(t))
	call := f.next(t, root.ID())

	late := f.delegate(t, root.ID()).Set("budget.tokens", 1000).Set("deadline", rc.Deadline.Add(time.Hour).Format(time.RFC3339))
	early := f.delegate(t, root.ID()).Set("budget.tokens", 1000).Set("deadline", rc.Deadline.Add(-time.Minute).Format(time.RFC3339))
	for _, d := range []capsuletest.Doc{late, early} {
		f.publishChild(t, d, call.token)
		f.next(t, d.ID()).done <- capsule.Usage{Tokens: 10}
		require.Equal(t, capsule.Completed, f.wait(t, d.ID()).State)
	}
	cp, _, err := f.bundle.Store.Checkpoints.Get(ctx, late.ID())
	require.NoError(t, err)
	require.NotNil(t, cp.State.Overrides)
	require.True(t, rc.Deadline.Equal(*cp.State.Overrides.Deadline), "the parent's deadline bounds the child's")
	cp, _, err = f.bundle.Store.Checkpoints.Get(ctx, early.ID())
	require.NoError(t, err)
	require.Nil(t, cp.State.Overrides, "an earlier deadline of its own stands")
	call.done <- capsule.Usage{}
	require.Equal(t, capsule.Completed, f.wait(t, root.ID()).State)
}

// TestDepthChildWaitsForRoom: with --child-budget wait, a child whose caps
// do not fit what its parent has left waits (parent_capacity, in pending)
// before any call, and goes on once its sibling's end frees the room; one
// whose caps exceed the parent's whole cap halts at once.
func TestDepthChildWaitsForRoom(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0, func(c *pipeline.Config) { c.ChildBudget = pipeline.ChildBudgetWait })
	ctx := context.Background()
	root := f.delegate(t, "").Set("budget.tokens", 1000)
	f.publish(t, root.Sealed(t))
	rc := f.next(t, root.ID())

	first := f.delegate(t, root.ID()).Set("budget.tokens", 600)
	f.publishChild(t, first, rc.token)
	fc := f.next(t, first.ID())
	second := f.delegate(t, root.ID()).Set("budget.tokens", 600)
	f.publishChild(t, second, rc.token)
	cp := f.bundle.WaitCheckpoint(t, second.ID(), func(cp *capsule.Checkpoint) bool { return cp.State.Status == capsule.Waiting })
	require.Equal(t, capsule.TriggerParentCapacity, cp.State.Pause.Trigger)
	require.Contains(t, cp.State.Pause.Reason, "has 400 of 1000 tokens")
	pending, err := f.admin(t).Pending(ctx)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, second.ID(), pending[0].CapsuleID)

	huge := f.delegate(t, root.ID()).Set("budget.tokens", 5000)
	f.publishChild(t, huge, rc.token)
	s := f.wait(t, huge.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.BudgetExceeded(capsule.BudgetParentTokens).String(), s.HaltReason)

	fc.done <- capsule.Usage{Tokens: 100}
	require.Equal(t, capsule.Completed, f.wait(t, first.ID()).State)
	f.next(t, second.ID()).done <- capsule.Usage{Tokens: 100}
	require.Equal(t, capsule.Completed, f.wait(t, second.ID()).State, "its sibling's end made room")
	rc.done <- capsule.Usage{Tokens: 100}
	require.Equal(t, capsule.Completed, f.wait(t, root.ID()).State)
}
