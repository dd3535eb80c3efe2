package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/status"
	"github.com/sagad/sagad/store"
)

// Client is the read and publish side of the pipeline, for sagactl and
// producers: publish capsules, read status, list, history, wait.
type Client struct {
	js jetstream.JetStream
	// Reader reads status, list, history and waits; nil for a
	// [NewPublisher] client.
	*status.Reader
}

// NewClient binds to an existing sagad topology.
func NewClient(ctx context.Context, js jetstream.JetStream) (*Client, error) {
	kv, err := js.KeyValue(ctx, store.CheckpointsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, store.ErrNoTopology
	}
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", store.CheckpointsBucket, err)
	}
	return &Client{js: js, Reader: status.NewReader(js, store.ReaderOf(kv))}, nil
}

// NewPublisher returns a client that only publishes: it binds to nothing,
// so it needs no JetStream API rights (the intake's acknowledgement comes
// back on the publish's reply subject).
func NewPublisher(js jetstream.JetStream) *Client { return &Client{js: js} }

// Publish puts raw bytes on the intake subject, exactly as given, and returns
// the intake stream sequence.
func (c *Client) Publish(ctx context.Context, raw []byte, traceID string) (uint64, error) {
	m := nats.NewMsg(store.IntakeSubject)
	m.Data = raw
	if traceID != "" {
		m.Header.Set(store.HeaderTraceID, traceID)
	}
	ack, err := c.js.PublishMsg(ctx, m)
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return 0, store.ErrNoTopology
	}
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	return ack.Sequence, nil
}

// Status is what `sagactl status -o json` prints for one capsule.
type Status = status.Status

// HistoryEntry is one phase transition in a [Status].
type HistoryEntry = status.HistoryEntry

// Call is the agent call running for a capsule, in a [Status].
type Call = status.Call

// StatusOf renders a checkpoint as a [Status].
func StatusOf(cp *capsule.Checkpoint) Status { return status.Of(cp) }

// MergeEvents merges two event lists, each in order, into one ordered by
// time (a transition's events keep their order), dropping repeated ids.
func MergeEvents(a, b []capsule.Event) []capsule.Event { return status.MergeEvents(a, b) }

// Of returns a client reading checkpoints through cps on js: sagad's own
// reads, served to operators by its admin service.
func Of(js jetstream.JetStream, cps *store.Checkpoints) *Client {
	return &Client{js: js, Reader: status.NewReader(js, cps)}
}

// Settled reports whether the capsule of s has ended or needs a person,
// what [Client.Wait] waits for.
func Settled(s Status) bool { return status.Settled(s) }
