package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// spawner is issue 33's delegating worker: every call publishes three
// child capsules of its own kind (with the call's token), waits until
// RECEPTION took each, and reports 1,000 tokens.
type spawner struct {
	t   *testing.T
	b   *sagatest.Bundle
	js  jetstream.JetStream
	mu  *sync.Mutex
	err *error // the first thing that went wrong in a call
}

const spawnerTokens = 1000

func (s spawner) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	if err := s.spawn(ctx, req); err != nil {
		if ctx.Err() != nil {
			// The claim was lost (two sagads on two busy cores): the
			// call is made again, with the same children.
			return executors.Result{}, err
		}
		s.mu.Lock()
		if *s.err == nil {
			*s.err = err
		}
		s.mu.Unlock()
		return executors.Result{}, err
	}
	return executors.Result{Content: []byte(`{"ok":true}`), MediaType: "application/json", Usage: capsule.Usage{Tokens: spawnerTokens}}, nil
}

func (s spawner) spawn(ctx context.Context, req executors.Request) error {
	keys := make([]string, 0, 6)
	for range 3 {
		d := s.b.Own(s.t, capsuletest.New().Set("task.kind", "spawn").Set("parent_capsule_id", req.Capsule.CapsuleID))
		m := nats.NewMsg(store.IntakeSubject)
		m.Data = d.Sealed(s.t)
		m.Header.Set(store.HeaderParentToken, req.CallToken)
		ack, err := s.js.PublishMsg(ctx, m)
		if err != nil {
			return err
		}
		keys = append(keys, d.ID(), "x-"+strconv.FormatUint(ack.Sequence, 10))
	}
	// The call stays in flight until each child was received, linked or
	// refused (its key is its id or its intake sequence).
	for i := 0; i < len(keys); i += 2 {
		for {
			if _, _, err := s.b.Store.Checkpoints.Get(ctx, keys[i]); err == nil {
				break
			}
			if _, _, err := s.b.Store.Checkpoints.Get(ctx, keys[i+1]); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("child %s never received: %w", keys[i], ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

// TestDelegationTreeNeverOverRoot is issue 33's reproduction: a root capped
// at 10,000 tokens whose executor spawns three children per call, every
// call charged 1,000 tokens, four levels deep (the fifth halts
// depth_exceeded), on two sagads sharing the work. Before children
// reserved their caps, such a tree was charged up to 121,000 tokens; now
// across 20 trees, all at once, no tree is charged past its root's cap
// (its children not fitting halt before any call).
func TestDelegationTreeNeverOverRoot(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		firstErr error
		sp       = &spawner{t: t, mu: &mu, err: &firstErr}
	)
	f := setupWith(t, func(c *pipeline.Config) {
		c.Workers = 16 // a call waits for its children's reception
		c.Executors.RegisterExecutor("spawn", sp)
	})
	sp.b, sp.js = f.bundle, f.js
	ctx := context.Background()
	_, js := natstest.Connect(t, f.srv)
	other, err := pipeline.New(ctx, js, f.cfg)
	require.NoError(t, err)
	require.NoError(t, other.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		other.Stop(ctx)
	})

	const rootCap = 10000
	roots := make([]string, 20)
	for i := range roots {
		d := f.own(t, capsuletest.New().Set("task.kind", "spawn").Set("budget.tokens", rootCap))
		roots[i] = d.ID()
		f.publish(t, d.Sealed(t))
	}
	refused, most := 0, int64(0)
	for run, root := range roots {
		total, n, r, late := treeSpend(t, f, root)
		require.LessOrEqual(t, total, int64(rootCap), "run %d: the tree of %d capsules spent past its root's cap", run, n)
		require.Empty(t, late, "run %d: children refused after a call", run)
		refused, most = refused+r, max(most, total)
	}
	t.Logf("20 trees: the most any spent was %d tokens of %d; %d children refused for want of room", most, rootCap, refused)
	mu.Lock()
	require.NoError(t, firstErr)
	mu.Unlock()
	require.Positive(t, refused, "children were refused for want of room")
}

// treeSpend waits until every capsule of root's tree ended and returns
// what they spent in total, how many there were, how many halted
// budget_exceeded:parent_* for want of room, and which of those spent
// something first (halted after their charge, not before any call).
func treeSpend(t *testing.T, f *fixture, root string) (total int64, n, refused int, late []string) {
	t.Helper()
	ctx := context.Background()
	queue := []string{root}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		cp := waitEnded(t, f, id)
		n++
		total += cp.State.BudgetUsed.Tokens
		switch cp.State.HaltReason {
		case capsule.BudgetExceeded(capsule.BudgetParentTokens).String(), capsule.BudgetExceeded(capsule.BudgetParentDollars).String():
			refused++
			if cp.State.BudgetUsed.Tokens != 0 {
				late = append(late, id)
			}
		}
		// Its call waited for every child's reception: the family lists
		// them all once it ended.
		fam, ok, err := f.bundle.Store.Budgets.FamilyOf(ctx, id)
		require.NoError(t, err)
		if ok {
			require.Zero(t, fam.More)
			queue = append(queue, fam.Children...)
		}
	}
	return total, n, refused, late
}

// waitEnded waits (a minute: the trees share two cores with the rest of
// the suite) until capsule id ended, and returns its checkpoint.
func waitEnded(t *testing.T, f *fixture, id string) *capsule.Checkpoint {
	t.Helper()
	var cp *capsule.Checkpoint
	natstest.Eventually(t, 60*time.Second, 10*time.Millisecond, func() bool {
		got, _, err := f.bundle.Store.Checkpoints.Get(context.Background(), id)
		if errors.Is(err, store.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		cp = got
		return got.Terminal()
	}, "capsule %s never ended", id)
	return cp
}
