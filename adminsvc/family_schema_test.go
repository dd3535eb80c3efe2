package adminsvc

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	statuspkg "github.com/sagad/sagad/status"
)

// TestStatusReplyFamilySchema: the status of a child that is also a parent
// (parent, depth, children, children_more, children_used) is one the
// status-reply schema takes; a root's omits them all.
func TestStatusReplyFamilySchema(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := &capsule.Checkpoint{CapsuleID: "c", Key: "c", TraceID: "t", Parent: "p", Depth: 2, CreatedAt: at, UpdatedAt: at,
		State: capsule.CheckpointState{Phase: capsule.Execution, Status: capsule.InProgress}}
	s := statuspkg.Of(cp)
	s.Children, s.ChildrenMore, s.ChildrenUsed = []string{"k1"}, 1, &capsule.Usage{Tokens: 3, Dollars: 0.1}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.NoError(t, validateSchema(t, "status-reply", b), "%s", b)

	cp.Parent, cp.Depth = "", 0
	b, err = json.Marshal(statuspkg.Of(cp))
	require.NoError(t, err)
	require.NoError(t, validateSchema(t, "status-reply", b), "%s", b)
	require.NotContains(t, string(b), `"parent"`)
	require.NotContains(t, string(b), `"children`)
}
