package budget_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
)

// TestFamilyChargedOnce: a descendant's charge counts once in its
// ancestor's family record however often it is applied again, a child is
// linked once, and the caps and grandparent of the first link stay.
func TestFamilyChargedOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.tr.AddChild(f.ctx, "p", "gp", "c1", caps))
	require.NoError(t, f.tr.AddChild(f.ctx, "p", "gp", "c1", caps))
	require.NoError(t, f.tr.AddChild(f.ctx, "p", "other", "c2", capsule.Budget{Tokens: 1}))
	u := capsule.Usage{Tokens: 100, Dollars: 0.25}
	for range 3 {
		fam, err := f.tr.ChargeDescendant(f.ctx, "p", "c1", "c1/1/exec", u)
		require.NoError(t, err)
		require.Equal(t, u, fam.Used)
	}
	fam, err := f.tr.ChargeDescendant(f.ctx, "p", "c2", "c2/1/exec", u)
	require.NoError(t, err)
	require.Equal(t, budget.Family{Caps: caps, Used: u.Add(u), Parent: "gp", Children: []string{"c1", "c2"}}, fam)
	_, err = f.tr.ChargeDescendant(f.ctx, "p", "c3", "c3/1/exec", capsule.Usage{Tokens: -1})
	require.ErrorIs(t, err, capsule.ErrInvalidUsage)

	_, ok, err := f.tr.FamilyOf(f.ctx, "nobody")
	require.NoError(t, err)
	require.False(t, ok)
}

// TestFamilyChildrenBounded: past MaxChildrenListed the children are
// counted, not listed, so the record stays small.
func TestFamilyChildrenBounded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range budget.MaxChildrenListed + 3 {
		require.NoError(t, f.tr.AddChild(f.ctx, "p", "", "child-"+strconv.Itoa(i), caps))
	}
	require.NoError(t, f.tr.AddChild(f.ctx, "p", "", "child-"+strconv.Itoa(budget.MaxChildrenListed+2), caps))
	fam, ok, err := f.tr.FamilyOf(f.ctx, "p")
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, fam.Children, budget.MaxChildrenListed)
	require.Equal(t, 3, fam.More, "a child added again is not counted again")

	// At its largest (every child listed, the charge window full, ids the
	// length of UUID keys) the record stays one small KV value.
	uuid := "5a6a0000-0000-4000-8000-000000000000"
	for i := range budget.MaxChildrenListed + 3 {
		require.NoError(t, f.tr.AddChild(f.ctx, "q", "", uuid[:30]+strconv.Itoa(100000+i), caps))
	}
	for i := range 300 {
		_, err := f.tr.ChargeDescendant(f.ctx, "q", "c", uuid[:30]+strconv.Itoa(100000+i)+"/"+uuid+"/1/exec/a1", capsule.Usage{Tokens: 1})
		require.NoError(t, err)
	}
	kv, err := f.js.KeyValue(f.ctx, "SAGA_BUDGETS")
	require.NoError(t, err)
	e, err := kv.Get(f.ctx, "parent.q")
	require.NoError(t, err)
	t.Logf("family record at its largest: %d bytes", len(e.Value()))
	require.Less(t, len(e.Value()), 64<<10)
}
