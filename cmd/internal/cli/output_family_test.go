package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
)

// TestStatusShowsParentAndChildren: sagactl status names a child's parent
// and depth, and a parent's children and what they spent; a capsule with
// neither shows neither line.
func TestStatusShowsParentAndChildren(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, printStatus(&b, client.Status{CapsuleID: "c", Parent: "p", Depth: 2,
		Children: []string{"k1", "k2"}, ChildrenMore: 3, ChildrenUsed: &capsule.Usage{Tokens: 40, Dollars: 0.5}}))
	out := b.String()
	require.Regexp(t, `(?m)^parent:\s+p \(depth 2\)$`, out)
	require.Regexp(t, `(?m)^children:\s+k1, k2 \(and 3 more\)$`, out)
	require.Regexp(t, `(?m)^children_used:\s+40 tokens, \$0\.5000`, out)

	b.Reset()
	require.NoError(t, printStatus(&b, client.Status{CapsuleID: "root"}))
	require.NotContains(t, b.String(), "parent:")
	require.NotContains(t, b.String(), "children")
}
