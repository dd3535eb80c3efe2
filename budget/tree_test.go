package budget_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
)

// TestTreeReservations: a child reserves at its parent, once however
// often it asks; one that does not fit is refused, holding nothing; a
// grandchild's spend moves out of its parent's hold at the root; a child's
// end marks it ended (no child admitted under it any more) and shrinks its
// hold to what its own children hold, which their ends release in turn.
func TestTreeReservations(t *testing.T) {
	t.Parallel()
	f := setup(t)
	root := capsule.Budget{Tokens: 10000}
	_, err := f.tr.ChargeOwn(f.ctx, "r", "", "r/1/exec", root, capsule.Usage{Tokens: 1000})
	require.NoError(t, err)
	require.NoError(t, f.tr.AddChild(f.ctx, "r", "", "c", root))

	_, err = f.tr.ReserveChild(f.ctx, "nobody", "x", capsule.Budget{Tokens: 1})
	require.ErrorIs(t, err, budget.ErrNoFamily)

	for range 2 {
		a, err := f.tr.ReserveChild(f.ctx, "r", "c", capsule.Budget{Tokens: 5000})
		require.NoError(t, err)
		require.True(t, a.Admitted)
	}
	require.NoError(t, f.tr.AddChild(f.ctx, "r", "", "c2", root))
	a, err := f.tr.ReserveChild(f.ctx, "r", "c2", capsule.Budget{Tokens: 4500})
	require.NoError(t, err)
	require.False(t, a.Admitted, "1000 own + 5000 reserved + 4500 is over 10000")
	require.Equal(t, capsule.BudgetParentTokens, a.Exceeded)
	require.Equal(t, 1, a.Family.Holders, "a refused child holds nothing")

	// c's child g takes 3000 of c's 5000, which c's hold at r covers.
	require.NoError(t, f.tr.AddChild(f.ctx, "c", "r", "g", capsule.Budget{Tokens: 5000}))
	a, err = f.tr.ReserveChild(f.ctx, "c", "g", capsule.Budget{Tokens: 3000})
	require.NoError(t, err)
	require.True(t, a.Admitted)
	for _, at := range []struct{ ancestor, holder string }{{"c", "g"}, {"r", "c"}} {
		_, err := f.tr.ChargeDescendant(f.ctx, at.ancestor, at.holder, "g/1/exec", capsule.Usage{Tokens: 1000})
		require.NoError(t, err)
	}
	fam, _, err := f.tr.FamilyOf(f.ctx, "r")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{Tokens: 4000}, fam.Reserved, "c's 5000 less g's 1000")
	require.Equal(t, capsule.Usage{Tokens: 6000}, fam.Committed())

	// c ends before g: its hold shrinks to g's 2000 left, and c admits no
	// child any more.
	for range 2 {
		_, err := f.tr.ReleaseChild(f.ctx, "r", "c")
		require.NoError(t, err)
	}
	fam, _, err = f.tr.FamilyOf(f.ctx, "r")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{Tokens: 2000}, fam.Reserved)
	require.NoError(t, f.tr.AddChild(f.ctx, "c", "r", "late", capsule.Budget{Tokens: 5000}))
	a, err = f.tr.ReserveChild(f.ctx, "c", "late", capsule.Budget{Tokens: 1})
	require.NoError(t, err)
	require.True(t, a.ParentEnded)
	require.False(t, a.Admitted)

	// g ends: nothing of the tree is held any more.
	released, err := f.tr.ReleaseChild(f.ctx, "c", "g")
	require.NoError(t, err)
	require.True(t, released)
	released, err = f.tr.ReleaseChild(f.ctx, "c", "g")
	require.NoError(t, err)
	require.False(t, released)
	fam, _, err = f.tr.FamilyOf(f.ctx, "r")
	require.NoError(t, err)
	require.Zero(t, fam.Holders)
	require.Equal(t, capsule.Usage{Tokens: 1000}, fam.Own)
	require.Equal(t, capsule.Usage{Tokens: 1000}, fam.Used)
}

// TestChargeInFlightAtEnd: a grandchild's charge is in flight (counted at
// some of its ancestors, not yet at the others) when its parent ends and a
// sibling of that parent asks for room at the root. The parent's hold at
// the root shrinks to what its own children still hold; had the charge
// been counted at the parent first (out of the grandchild's hold there)
// and at the root only after, it would have been in neither the parent's
// holds nor the root's total at that moment, and the sibling would have
// been admitted into room the charge was about to take: 4,000 tokens
// counted nowhere, a tree of 10,000 able to spend 14,000.
func TestChargeInFlightAtEnd(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := f.ctx
	require.NoError(t, f.tr.AddChild(ctx, "r", "", "c", capsule.Budget{Tokens: 10000}))
	a, err := f.tr.ReserveChild(ctx, "r", "c", capsule.Budget{Tokens: 5000})
	require.NoError(t, err)
	require.True(t, a.Admitted)
	charge := func(key, parent string, caps capsule.Budget, n int64) {
		t.Helper()
		u := capsule.Usage{Tokens: n}
		_, err := f.tr.ChargeOwn(ctx, key, parent, key+"/1/exec", caps, u)
		require.NoError(t, err)
		_, err = f.tr.ChargeAncestors(ctx, parent, key, key+"/1/exec", u)
		require.NoError(t, err)
	}
	charge("c", "r", capsule.Budget{Tokens: 5000}, 1000)
	require.NoError(t, f.tr.AddChild(ctx, "c", "r", "g", capsule.Budget{Tokens: 5000}))
	a, err = f.tr.ReserveChild(ctx, "c", "g", capsule.Budget{Tokens: 4000})
	require.NoError(t, err)
	require.True(t, a.Admitted)

	// g's charge of 4000: between its first ancestor's write and its
	// second, c ends and its sibling d asks for 9000 at r.
	var sibling budget.ChildAdmission
	var between []string
	budget.SetChargedAt(f.tr, func(ancestor string) {
		between = append(between, ancestor)
		if len(between) > 1 {
			return
		}
		_, err := f.tr.ReleaseChild(ctx, "r", "c")
		require.NoError(t, err)
		require.NoError(t, f.tr.AddChild(ctx, "r", "", "d", capsule.Budget{Tokens: 10000}))
		sibling, err = f.tr.ReserveChild(ctx, "r", "d", capsule.Budget{Tokens: 9000})
		require.NoError(t, err)
	})
	charge("g", "c", capsule.Budget{Tokens: 4000}, 4000)
	budget.SetChargedAt(f.tr, nil)
	require.False(t, sibling.Admitted, "1000 spent, 4000 in flight: 9000 more is over 10000")
	require.Equal(t, capsule.BudgetParentTokens, sibling.Exceeded)
	require.Equal(t, []string{"r", "c"}, between, "the root is charged first")

	// g ends: nothing of the tree is held any more, and r counted all.
	_, err = f.tr.ReleaseChild(ctx, "c", "g")
	require.NoError(t, err)
	fam, _, err := f.tr.FamilyOf(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, capsule.Usage{Tokens: 5000}, fam.Used)
	require.Zero(t, fam.Holders)
	a, err = f.tr.ReserveChild(ctx, "r", "d", capsule.Budget{Tokens: 5000})
	require.NoError(t, err)
	require.True(t, a.Admitted, "what the tree did not spend is room again")
}

// TestTreeNeverOverRoot: a root capped 10,000 tokens makes four calls of
// 1,000 tokens, each spawning three children; each child (capped 2,000)
// spends 1,000 and spawns three of its own (capped 1,000), and so on four
// levels down; the twelve children's subtrees reserve, spend and end
// concurrently through two Trackers (two sagads' own connections). Across
// 20 trees, what the tree spent never exceeds the root's cap, and every
// reservation is released in the end.
//
// The root's own calls are charged before its children ask for room. A
// parent's own call is not reserved (docs/DELEGATION.md, "Caps"): charged
// while its children are admitted, it may find its room taken and cross
// the cap, as any capsule's last call may cross its own cap. So a root
// whose later calls raced its earlier calls' children could spend 11,000
// here without any fault of the tree's records (say call 0's children
// spend 5,000 and end, call 1 takes the root's own to 2,000, a child of
// call 1 takes the last 3,000 and spends 2,000 of it, call 2 takes the
// 1,000 it left and call 3 goes on with nothing left: with the caps of
// issue 33's tree, 3,000 a child), which sagad's bound does not exclude
// either: such a root halts budget_exceeded:tokens after that crossing
// call.
// What is held to the cap here is every order the children's
// admissions, charges and ends can take.
func TestTreeNeverOverRoot(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, js2 := natstest.Connect(t, f.s)
	trackers := []*budget.Tracker{f.tr, f.tracker(t, js2)}
	const rootCap, each = 10000, 1000
	// Caps with no room to spare: a child's subtree may spend all of it
	// (its own 1,000 and one child's), so a charge counted nowhere for a
	// moment is enough to admit one child too many.
	capAt := func(depth int) capsule.Budget { return capsule.Budget{Tokens: max(2000/int64(depth), each)} }
	for run := range 20 {
		tree := &spender{tr: trackers, t: t, f: f, capAt: capAt, spent: map[string]int64{}}
		root := fmt.Sprintf("root-%d", run)
		for call := range 4 {
			_, err := f.tr.ChargeOwn(f.ctx, root, "", fmt.Sprintf("%s/%d/exec", root, call), capsule.Budget{Tokens: rootCap}, capsule.Usage{Tokens: each})
			require.NoError(t, err)
			tree.add(root, each)
		}
		for call := range 4 {
			tree.spawn(root, "", 1, call)
		}
		tree.wg.Wait()
		total := tree.total()
		require.LessOrEqual(t, total, int64(rootCap), "run %d", run)
		require.Greater(t, total, int64(rootCap/2), "run %d: the tree had room to spend", run)
		fam, _, err := f.tr.FamilyOf(f.ctx, root)
		require.NoError(t, err)
		require.Equal(t, total-tree.spent[root], fam.Used.Tokens, "run %d", run)
		require.Zero(t, fam.Holders, "run %d: every reservation released", run)
	}
}

// spender plays one delegation tree's capsules.
type spender struct {
	t     *testing.T
	f     *fixture
	tr    []*budget.Tracker
	capAt func(depth int) capsule.Budget
	wg    sync.WaitGroup
	mu    sync.Mutex
	spent map[string]int64
}

func (s *spender) add(id string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spent[id] += n
}

func (s *spender) total() int64 {
	var n int64
	for _, v := range s.spent {
		n += v
	}
	return n
}

// spawn starts three children of parent (whose own parent is
// grandparent), at depth, concurrently. It returns once each has asked
// for room at parent once: a child ends after its own children asked, so
// its end races their charges (as in sagad, where a parent's call may end
// while the children it published run).
func (s *spender) spawn(parent, grandparent string, depth, n int) {
	var asked sync.WaitGroup
	for i := range 3 {
		id := fmt.Sprintf("%s.%d-%d", parent, n, i)
		caps := s.capAt(depth)
		s.wg.Add(1)
		asked.Add(1)
		go func() {
			defer s.wg.Done()
			tr := s.tr[(n+i)%2]
			ctx := s.f.ctx
			err := tr.AddChild(ctx, parent, grandparent, id, caps)
			var a budget.ChildAdmission
			if err == nil {
				a, err = tr.ReserveChild(ctx, parent, id, caps)
			}
			asked.Done()
			require.NoError(s.t, err)
			for !a.Admitted && !a.ParentEnded && a.Family.CouldFit(caps) {
				// As under --child-budget wait, where the sweeper resumes
				// it: a child that may fit once siblings end asks again,
				// so admissions meet every moment of their ends.
				a, err = tr.ReserveChild(ctx, parent, id, caps)
				require.NoError(s.t, err)
			}
			if !a.Admitted {
				return
			}
			// Its one call: charged to itself and to every ancestor.
			u := capsule.Usage{Tokens: 1000}
			_, err = tr.ChargeOwn(ctx, id, parent, id+"/1/exec", caps, u)
			require.NoError(s.t, err)
			_, err = tr.ChargeAncestors(ctx, parent, id, id+"/1/exec", u)
			require.NoError(s.t, err)
			s.add(id, u.Tokens)
			if depth < 4 {
				s.spawn(id, parent, depth+1, n)
			}
			_, err = tr.ReleaseChild(ctx, parent, id)
			require.NoError(s.t, err)
		}()
	}
	asked.Wait()
}
