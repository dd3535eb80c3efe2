// Package jspub publishes to JetStream streams over a plain NATS request and
// reads the acknowledgement itself. The jetstream client decodes every
// acknowledgement with encoding/json, which on sagad's hot path (several
// writes per transition) was a visible share of the CPU; an acknowledgement
// is small and fixed in shape, so the common case is read without it.
//
// Subjects are the streams' own: sagad's JetStream contexts use no domain or
// API prefix.
package jspub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
)

// Conn returns js's connection for this package's publishes, or nil when js
// uses a JetStream domain: a domain's KV subjects are not the buckets' own,
// so callers then keep to the jetstream client.
func Conn(js jetstream.JetStream) *nats.Conn {
	if js.Options().Domain != "" {
		return nil
	}
	return js.Conn()
}

// DefaultTimeout bounds a publish whose context has no deadline, as the
// jetstream client's default does.
const DefaultTimeout = 5 * time.Second

// noRespondersRetries and noRespondersDelay: a stream electing a leader (in
// a cluster) has no responder for a moment; the jetstream client tries
// again too.
const (
	noRespondersRetries = 3
	noRespondersDelay   = 250 * time.Millisecond
)

// Publish publishes m and waits for JetStream's acknowledgement. It returns
// the stored message's stream sequence (the KV revision, for a bucket), or
// the stream's refusal as a *jetstream.APIError (a failed expected-sequence
// check among them: see internal/cas).
func Publish(ctx context.Context, nc *nats.Conn, m *nats.Msg) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	var resp *nats.Msg
	var err error
	for attempt := 1; ; attempt++ {
		resp, err = nc.RequestMsgWithContext(ctx, m)
		if !errors.Is(err, nats.ErrNoResponders) || attempt == noRespondersRetries {
			break
		}
		select {
		case <-time.After(noRespondersDelay):
		case <-ctx.Done():
			return 0, fmt.Errorf("publish %s: %w", m.Subject, ctx.Err())
		}
	}
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	seq, err := ParseAck(resp.Data)
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return seq, nil
}

// ParseAck reads the stream sequence from a JetStream publish
// acknowledgement, {"stream":"…","seq":N}, or returns its error as a
// *jetstream.APIError.
func ParseAck(data []byte) (uint64, error) {
	if i := bytes.Index(data, []byte(`"seq":`)); i >= 0 && !bytes.Contains(data, []byte(`"error"`)) {
		var n uint64
		j := i + len(`"seq":`)
		k := j
		for ; k < len(data) && data[k] >= '0' && data[k] <= '9'; k++ {
			n = n*10 + uint64(data[k]-'0')
		}
		if k > j && n > 0 {
			return n, nil
		}
	}
	// Anything else (an error, an unexpected shape) takes the slow path.
	var ack struct {
		Error *jetstream.APIError `json:"error"`
		Seq   uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return 0, fmt.Errorf("publish acknowledgement %q: %w", data, err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if ack.Seq == 0 {
		return 0, fmt.Errorf("publish acknowledgement without a sequence: %q", data)
	}
	return ack.Seq, nil
}

// KVCreate stores value under key in bucket kv if the key has no entry, in
// one request for a key never written. A key whose last entry is a delete
// or purge marker is taken over by the KV client's Create, as is its
// refusal of a live key (jetstream.ErrKeyExists, see internal/cas).
func KVCreate(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, key string, value []byte) (uint64, error) {
	rev, err := KVUpdate(ctx, nc, kv, key, value, 0)
	if err == nil || !cas.Conflict(err) {
		return rev, err
	}
	return kv.Create(ctx, key, value)
}

// KVUpdate stores value under key in bucket kv if the key's last entry
// (a value or a marker) is still revision last, 0 for none; otherwise it
// fails with a conflict (see internal/cas).
func KVUpdate(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, key string, value []byte, last uint64) (uint64, error) {
	return Publish(ctx, nc, kvUpdateMsg(kv, key, value, last))
}

func kvUpdateMsg(kv jetstream.KeyValue, key string, value []byte, last uint64) *nats.Msg {
	h := NewHeaders(1)
	kvUpdateHeaders(&h, last)
	return NewMsg(kvSubject(kv, key), value, h)
}

// kvUpdateHeaders sets the headers of a KV update at revision last: those
// of kvUpdateMsg, and of the pooled message [Writes.KVUpdate] publishes.
func kvUpdateHeaders(h *Headers, last uint64) {
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
}

// KVPurge purges key in bucket kv if its revision is still rev, leaving a
// purge marker that expires after ttl (the bucket must allow message TTLs).
// It returns the marker's revision.
func KVPurge(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, key string, rev uint64, ttl time.Duration) (uint64, error) {
	return Publish(ctx, nc, kvPurgeMsg(kv, key, rev, ttl))
}

func kvPurgeMsg(kv jetstream.KeyValue, key string, rev uint64, ttl time.Duration) *nats.Msg {
	h := NewHeaders(4)
	kvPurgeHeaders(&h, rev, ttl)
	return NewMsg(kvSubject(kv, key), nil, h)
}

// kvPurgeHeaders sets the headers of a KV purge at revision rev: those of
// kvPurgeMsg, and of the pooled message [Writes.KVPurge] publishes.
func kvPurgeHeaders(h *Headers, rev uint64, ttl time.Duration) {
	h.Set("KV-Operation", "PURGE")
	h.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if ttl > 0 {
		h.Set(jetstream.MsgTTLHeader, ttl.String())
	}
}

func kvSubject(kv jetstream.KeyValue, key string) string { return "$KV." + kv.Bucket() + "." + key }
