package pipeline_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// TestCapsuleIDsAreCaseInsensitive: a UUID is one capsule whatever the case
// of its hex digits. An upper-case capsule is keyed by its lower-case id; a
// second capsule under the same id in the other case is a second capsule
// under a taken id (refused by Rule 2), never a second run; and depends_on
// finds a dependency whatever the case it is written in.
func TestCapsuleIDsAreCaseInsensitive(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	first := f.own(t, capsuletest.New())
	id := first.ID()
	first.Set("capsule_id", strings.ToUpper(id))
	f.publish(t, first.Sealed(t))
	s := f.wait(t, id)
	require.Equal(t, capsule.Completed, s.State, "keyed by the canonical (lower-case) id")
	require.Equal(t, id, s.CapsuleID)
	require.Equal(t, id, s.Key)

	again := first.Set("capsule_id", id) // the same capsule with its id in lower case
	f.publish(t, again.Sealed(t))
	var other client.Status
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		list, err := f.client.List(ctx, capsule.Halted)
		if err != nil || len(list) != 1 {
			return false
		}
		other = list[0]
		return true
	}, "the copy halts")
	require.Equal(t, "absolute_rules_violated:[2]", other.HaltReason)
	require.Equal(t, id, other.CapsuleID)
	require.NotEqual(t, id, other.Key)
	require.Equal(t, int64(1), f.executed.Load(), "never run twice")

	dep := f.own(t, capsuletest.New()).Set("depends_on", []any{strings.ToUpper(id)})
	f.publish(t, dep.Sealed(t))
	require.Equal(t, capsule.Completed, f.wait(t, dep.ID()).State, "an upper-case dependency is the completed capsule")
	require.Equal(t, int64(2), f.executed.Load())
}

// TestHaltedAtReceptionDoesNotOwnItsID: a capsule RECEPTION halts (here a
// bad digest) is kept under its intake sequence, so the corrected capsule
// runs under the id instead of being taken for a duplicate.
func TestHaltedAtReceptionDoesNotOwnItsID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	doc := f.own(t, capsuletest.New())
	bad := doc.Sealed(t)
	var tampered capsuletest.Doc
	require.NoError(t, json.Unmarshal(bad, &tampered))
	tampered.Set("task.title", "changed after sealing")
	raw, err := json.Marshal(tampered)
	require.NoError(t, err)
	f.publish(t, raw)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		list, err := f.client.List(ctx, capsule.Halted)
		if err != nil {
			return false
		}
		for _, s := range list {
			if s.CapsuleID == doc.ID() && strings.HasPrefix(s.Key, "x-") && s.HaltReason == capsule.IntegrityMismatch().String() {
				return true
			}
		}
		return false
	}, "the tampered capsule halts under an x- key")

	f.publish(t, bad) // the original, correctly sealed bytes
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		cp, err := f.client.Checkpoint(ctx, doc.ID())
		return err == nil && cp.Key == doc.ID() && cp.State.Status == capsule.Completed
	}, "the corrected capsule runs under its id")
	require.Equal(t, int64(1), f.executed.Load())
}
