package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// composeConfig serves examples/compositions' step kinds with the stub,
// for producer alice and producer bob.
const composeConfig = `{
  "producers": ["alice", "bob"],
  "executors": {
    "produce":   {"type": "stub"},
    "translate": {"type": "stub"},
    "validate":  {"type": "stub"}
  }
}`

// loopExample is examples/compositions/loop.json with the files it names
// made in a's workspace.
func (a *arena) loopExample() []byte {
	a.t.Helper()
	doc, err := os.ReadFile("../../../examples/compositions/loop.json")
	require.NoError(a.t, err)
	dir := filepath.Join(a.workspace, "examples", "compositions", "contract")
	require.NoError(a.t, os.MkdirAll(dir, 0o755))
	require.NoError(a.t, os.WriteFile(filepath.Join(a.workspace, "examples", "compositions", "README.md"), []byte("x\n"), 0o600))
	for _, f := range []string{"draft.md", "check.md", "release.md"} {
		require.NoError(a.t, os.WriteFile(filepath.Join(dir, f), []byte("x\n"), 0o600))
	}
	return doc
}

// composition is run 1 of producer's composition id as sagad records it,
// nil while there is none.
func (a *arena) composition(id, producer string) *compose.Record {
	a.t.Helper()
	ctx := context.Background()
	kv, err := a.js.KeyValue(ctx, store.CompositionsBucket)
	require.NoError(a.t, err)
	keys, err := kv.ListKeys(ctx)
	require.NoError(a.t, err)
	defer func() { _ = keys.Stop() }()
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		if r, err := compose.DecodeRecord(e.Value()); err == nil && r.CompositionID == id && r.Producer == producer && r.RunOf() == 1 {
			return r
		}
	}
	return nil
}

// TestAttackPlainCapsuleUnderHeldStepID plays a producer, with its own
// seed, that composes examples/compositions/loop.json and publishes a
// capsule of its own (no chain member: a plain capsule) under the id the
// compose reply gives the release step, held until the loop passes; and
// another producer that does the same. Neither takes the id: each halts
// chain_membership_refused under its intake sequence, and the
// composition completes with the release step sagad built.
func TestAttackPlainCapsuleUnderHeldStepID(t *testing.T) {
	t.Parallel()
	a := newArenaWith(t, composeConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reply, err := compose.Publish(ctx, a.conn("producer-alice"), a.loopExample())
	require.NoError(t, err)
	require.Equal(t, "alice", reply.Producer)
	require.Equal(t, compose.StepHeld, reply.Steps[2].State)
	held := reply.Steps[2].CapsuleID

	for _, role := range []string{"producer-alice", "producer-bob"} {
		js, err := jetstream.New(a.conn(role))
		require.NoError(t, err)
		plain := capsuletest.New().Set("capsule_id", held).Set("task.kind", "translate").
			Set("task.title", "released by "+role+", not by the loop").Sealed(t)
		ack, err := js.Publish(ctx, store.IntakeSubject, plain)
		require.NoError(t, err)
		var c capsule.Capsule
		require.NoError(t, json.Unmarshal(plain, &c))
		key := "x-" + strconv.FormatUint(ack.Sequence, 10)
		natstest.Eventually(t, 60*time.Second, 10*time.Millisecond, func() bool {
			if e := a.checkpoint(held); e != nil {
				var cp capsule.Checkpoint
				require.NoError(t, json.Unmarshal(e.Value(), &cp))
				require.NotEqual(t, c.Integrity.SHA256, cp.Digest, "%s's capsule took the held step's id", role)
			}
			return a.checkpoint(key) != nil
		}, "%s's capsule was never received", role)
		require.Equal(t, capsule.Halted, a.awaitEnd(key))
		var cp capsule.Checkpoint
		require.NoError(t, json.Unmarshal(a.checkpoint(key).Value(), &cp))
		require.Equal(t, capsule.HaltReason{Code: capsule.CodeChainMembershipRefused}.String(), cp.State.HaltReason, role)
		require.Equal(t, held, cp.CapsuleID, "the refusal names the id it claimed")
	}

	var rec *compose.Record
	natstest.Eventually(t, 90*time.Second, 20*time.Millisecond, func() bool {
		rec = a.composition(reply.CompositionID, "alice")
		return rec != nil && rec.StateOf() != compose.StateRunning
	}, "the composition never ended")
	require.Equal(t, compose.StateCompleted, rec.StateOf())
	require.Equal(t, capsule.Completed, a.awaitEnd(held))
	var cp capsule.Checkpoint
	require.NoError(t, json.Unmarshal(a.checkpoint(held).Value(), &cp))
	require.Equal(t, rec.StepDigests[2], cp.Digest, "the release step ran as sagad built it")
}
