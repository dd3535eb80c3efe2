package capsule

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckpointTraceParentJSON: trace_parent is written by the hand-written
// encoder exactly as encoding/json writes it, after trace_id, and left out
// when empty.
func TestCheckpointTraceParentJSON(t *testing.T) {
	t.Parallel()
	for _, tp := range []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		cp := fullCheckpoint()
		cp.TraceParent = tp
		want, err := json.Marshal(cp)
		require.NoError(t, err)
		got, err := cp.AppendJSON(nil)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		require.Equal(t, tp != "", json.Valid(got) && containsKey(got, "trace_parent"))
		var back Checkpoint
		require.NoError(t, json.Unmarshal(got, &back))
		require.Equal(t, tp, back.TraceParent)
	}
}

func containsKey(b []byte, k string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, ok := m[k]
	return ok
}
