package jspub

import (
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// asClient is how the KV client reads a direct get's answer (its status,
// its sequence header, then the operation and marker headers), written the
// way the client writes it: directEntry must agree with it.
func asClient(m *nats.Msg) (found bool, seq uint64, err error) {
	if len(m.Data) == 0 && m.Header.Get("Status") != "" {
		return false, 0, errors.New("status")
	}
	if len(m.Header) == 0 || m.Header.Get(jetstream.SequenceHeader) == "" {
		return false, 0, errors.New("headers")
	}
	seq, err = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return false, 0, err
	}
	op := jetstream.KeyValuePut
	if m.Header.Get("KV-Operation") != "" {
		switch m.Header.Get("KV-Operation") {
		case "DEL":
			op = jetstream.KeyValueDelete
		case "PURGE":
			op = jetstream.KeyValuePurge
		}
	} else if m.Header.Get(jetstream.MarkerReasonHeader) != "" {
		switch m.Header.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			op = jetstream.KeyValuePurge
		case "Remove":
			op = jetstream.KeyValueDelete
		}
	}
	return op == jetstream.KeyValuePut, seq, nil
}

// FuzzDirectEntry decodes answers a server (or anyone answering on its
// subject) could send, as header bytes and a body: directEntry must not
// panic and must find what the KV client finds.
func FuzzDirectEntry(f *testing.F) {
	f.Add([]byte("NATS/1.0\r\nNats-Stream: KV_B\r\nNats-Subject: $KV.B.k\r\nNats-Sequence: 7\r\nNats-Time-Stamp: 2026-01-01T00:00:00Z\r\n\r\n"), []byte("v"))
	f.Add([]byte("NATS/1.0 404 Message Not Found\r\n\r\n"), []byte(nil))
	f.Add([]byte("NATS/1.0 408 Request Timeout\r\n\r\n"), []byte(nil))
	f.Add([]byte("NATS/1.0\r\nNats-Sequence: 3\r\nKV-Operation: DEL\r\n\r\n"), []byte(nil))
	f.Add([]byte("NATS/1.0\r\nNats-Sequence: 3\r\nKV-Operation: PURGE\r\n\r\n"), []byte(nil))
	f.Add([]byte("NATS/1.0\r\nNats-Sequence: 3\r\nNats-Marker-Reason: MaxAge\r\n\r\n"), []byte(nil))
	f.Add([]byte("NATS/1.0\r\nNats-Sequence: 3\r\nNats-Marker-Reason: Other\r\n\r\n"), []byte("x"))
	f.Add([]byte("NATS/1.0\r\nNats-Sequence: x\r\n\r\n"), []byte("x"))
	f.Fuzz(func(t *testing.T, hdr, data []byte) {
		h, err := nats.DecodeHeadersMsg(hdr)
		if err != nil {
			return
		}
		m := &nats.Msg{Header: h, Data: data}
		v, seq, err := directEntry(m)
		found, wantSeq, werr := asClient(m)
		switch {
		case werr != nil:
			if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) && m.Header.Get("Status") != "404" {
				t.Fatalf("the client fails (%v), directEntry: %v", werr, err)
			}
		case !found:
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("a marker, directEntry: %v", err)
			}
		default:
			if err != nil || seq != wantSeq || string(v) != string(data) {
				t.Fatalf("an entry at %d, directEntry: %d %q %v", wantSeq, seq, v, err)
			}
		}
	})
}
