package sagatest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

// RequireContinuation waits for the continuation of key and requires it
// valid against its schema, with trigger at phase ph.
func (b *Bundle) RequireContinuation(t *testing.T, key string, trigger capsule.Trigger, ph capsule.Phase) {
	t.Helper()
	kv, err := b.JS.KeyValue(context.Background(), store.ContinuationsBucket)
	require.NoError(t, err)
	var e jetstream.KeyValueEntry
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		e, err = kv.Get(context.Background(), key)
		return err == nil
	}, "continuation of %s written", key)
	require.NoError(t, schemas.Validate(schemas.Continuation, e.Value()))
	var c capsule.Continuation
	require.NoError(t, json.Unmarshal(e.Value(), &c))
	require.Equal(t, trigger, c.Trigger)
	require.Equal(t, ph, c.Phase)
}

// RequireNoContinuation requires key to have no continuation.
func (b *Bundle) RequireNoContinuation(t *testing.T, key string) {
	t.Helper()
	kv, err := b.JS.KeyValue(context.Background(), store.ContinuationsBucket)
	require.NoError(t, err)
	_, err = kv.Get(context.Background(), key)
	require.Error(t, err)
}

// Continuation reads the continuation of key.
func (b *Bundle) Continuation(t *testing.T, key string) capsule.Continuation {
	t.Helper()
	kv, err := b.JS.KeyValue(context.Background(), store.ContinuationsBucket)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), key)
	require.NoError(t, err)
	var c capsule.Continuation
	require.NoError(t, json.Unmarshal(e.Value(), &c))
	return c
}

// History is the client's history of the capsule.
func (b *Bundle) History(t *testing.T, id string) []capsule.Event {
	t.Helper()
	events, err := b.Client.History(context.Background(), id)
	require.NoError(t, err)
	return events
}

// EventKinds are the kinds of the capsule's events, in order.
func (b *Bundle) EventKinds(t *testing.T, id string) []capsule.EventKind {
	t.Helper()
	events := b.History(t, id)
	out := make([]capsule.EventKind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}

// PhaseConsumer returns the info of phase ph's consumer.
func (b *Bundle) PhaseConsumer(t *testing.T, ph capsule.Phase) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := b.JS.Consumer(context.Background(), store.PhaseStream(ph), store.ConsumerName(ph))
	require.NoError(t, err)
	info, err := cons.Info(context.Background())
	require.NoError(t, err)
	return info
}

// WaitDrained waits until no phase has pending or unacknowledged messages.
func (b *Bundle) WaitDrained(t *testing.T) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
			cons, err := b.JS.Consumer(context.Background(), store.PhaseStream(ph), store.ConsumerName(ph))
			if err != nil {
				return false
			}
			info, err := cons.Info(context.Background())
			if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
				return false
			}
		}
		return true
	}, "phases drained")
}

// PendingItems is Admin.Pending without the ages, which grow by themselves.
func PendingItems(t *testing.T, a *admin.Admin) []admin.PendingItem {
	t.Helper()
	items, err := a.Pending(context.Background())
	require.NoError(t, err)
	for i := range items {
		items[i].AgeSecs = 0
	}
	return items
}
