package jspub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVReader reads the last entry of a key in one KV bucket the way the KV
// client's Get does, in one direct get request that carries its deadline
// (nats.Conn.Request's pooled timer) instead of a context made for each
// read: a context.WithTimeout, the KV client's request encoding and its
// formatted subject were most of a read's cost on sagad's side, and the
// lock read at RECEPTION and at EXECUTION are on every capsule's path.
//
// A reader made for a bucket that may not answer direct gets (see
// [NewKVReader]), or with no connection of its own (a JetStream domain,
// see [Conn]), is the KV client's Get under [ReadCtx].
type KVReader struct {
	kv jetstream.KeyValue
	w  *Writes
	nc *nats.Conn // nil: the KV client's Get
	// prefix is the direct get subject of the bucket's keys, up to the key.
	prefix string
}

// NewKVReader returns the reader of kv's keys, each read bounded by w's
// timeout (else [DefaultTimeout]) and by the caller's deadline. direct says
// the bucket's stream allows direct gets and is not a mirror (whose keys
// are the origin's): the KV client asks it the same subject then. Buckets
// made with jetstream.KeyValueConfig (sagad's) allow them.
func NewKVReader(nc *nats.Conn, kv jetstream.KeyValue, w *Writes, direct bool) *KVReader {
	r := &KVReader{kv: kv, w: w}
	if direct && nc != nil && kv != nil { // nil: a topology only planned (store.PlanTopology)
		b := kv.Bucket()
		r.nc, r.prefix = nc, "$JS.API.DIRECT.GET.KV_"+b+".$KV."+b+"."
	}
	return r
}

// Get returns the value and revision of key's last entry. A key never
// written, deleted, purged or expired is jetstream.ErrKeyNotFound, an
// invalid key jetstream.ErrInvalidKey, and a read out of time
// context.DeadlineExceeded, as from the KV client's Get.
func (r *KVReader) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if r.nc == nil {
		return r.slow(ctx, key)
	}
	if !ValidKey(key) {
		return nil, 0, jetstream.ErrInvalidKey
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	d := DefaultTimeout
	if r.w != nil && r.w.Timeout > 0 {
		d = r.w.Timeout
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 {
		return nil, 0, context.DeadlineExceeded
	}
	m, err := r.nc.Request(r.prefix+key, nil, d)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// No direct get here (the stream was changed, or it has no
		// leader this moment): the KV client knows what to ask.
		return r.slow(ctx, key)
	case errors.Is(err, nats.ErrTimeout):
		return nil, 0, context.DeadlineExceeded
	case err != nil:
		return nil, 0, err
	}
	return directEntry(m)
}

// slow is the KV client's Get under ReadCtx.
func (r *KVReader) slow(ctx context.Context, key string) ([]byte, uint64, error) {
	rctx, cancel := ReadCtx(ctx, r.w)
	defer cancel()
	e, err := r.kv.Get(rctx, key)
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

// directEntry reads a direct get's answer as the KV client does: a status
// (404: no such message) or the message, its stream sequence in a header,
// and a delete, purge or expiry marker read as no entry.
func directEntry(m *nats.Msg) ([]byte, uint64, error) {
	if len(m.Data) == 0 {
		if st := m.Header.Get("Status"); st != "" {
			if st == "404" {
				return nil, 0, jetstream.ErrKeyNotFound
			}
			desc := m.Header.Get("Description")
			if desc == "" {
				desc = "unable to get message"
			}
			return nil, 0, fmt.Errorf("nats: %s", desc)
		}
	}
	if len(m.Header) == 0 {
		return nil, 0, errors.New("nats: response should have headers")
	}
	seqStr := m.Header.Get(jetstream.SequenceHeader)
	if seqStr == "" {
		return nil, 0, errors.New("nats: missing sequence header")
	}
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("nats: invalid sequence header '%s': %v", seqStr, err)
	}
	if op := m.Header.Get("KV-Operation"); op != "" {
		if op == "DEL" || op == "PURGE" {
			return nil, 0, jetstream.ErrKeyNotFound
		}
	} else if reason := m.Header.Get(jetstream.MarkerReasonHeader); reason == "MaxAge" || reason == "Purge" || reason == "Remove" {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	return m.Data, seq, nil
}

// ValidKey reports whether key is a KV key the KV client takes: one or
// more of "-/_=.", ASCII letters and digits, neither starting nor ending
// with "." nor holding "..".
func ValidKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '/', c == '_', c == '=':
		case c == '.':
			if key[i+1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}
