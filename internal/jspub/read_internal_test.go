package jspub

import (
	"encoding/binary"
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/differential"
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

// directInput is a direct get's answer: its header bytes and its body.
type directInput struct{ hdr, data []byte }

// msg is the answer as a message; nil when its headers do not decode.
func (in directInput) msg() *nats.Msg {
	h, err := nats.DecodeHeadersMsg(in.hdr)
	if err != nil {
		return nil
	}
	return &nats.Msg{Header: h, Data: in.data}
}

// directResult is what a reading of an answer found.
type directResult struct {
	m     *nats.Msg
	v     []byte
	seq   uint64
	found bool
	err   error
}

// directEntryPair decodes answers a server (or anyone answering on its
// subject) could send: directEntry must not panic and must find what the
// KV client finds: a failure where it fails (not found only for a 404), a
// marker as not found, an entry with its sequence and body.
var directEntryPair = differential.Pair[directInput, directResult]{
	Name: "DirectEntry",
	Fast: func(in directInput) (directResult, error) {
		m := in.msg()
		v, seq, err := directEntry(m)
		return directResult{m: m, v: v, seq: seq, err: err}, nil
	},
	Reference: func(in directInput) (directResult, error) {
		m := in.msg()
		found, seq, err := asClient(m)
		return directResult{m: m, seq: seq, found: found, err: err}, nil
	},
	Compare: func(t testing.TB, in directInput, fast, ref directResult) {
		switch {
		case ref.err != nil:
			if fast.err == nil || errors.Is(fast.err, jetstream.ErrKeyNotFound) && ref.m.Header.Get("Status") != "404" {
				t.Fatalf("the client fails (%v), directEntry: %v", ref.err, fast.err)
			}
		case !ref.found:
			if !errors.Is(fast.err, jetstream.ErrKeyNotFound) {
				t.Fatalf("a marker, directEntry: %v", fast.err)
			}
		default:
			if fast.err != nil || fast.seq != ref.seq || string(fast.v) != string(in.data) {
				t.Fatalf("an entry at %d, directEntry: %d %q %v", ref.seq, fast.seq, fast.v, fast.err)
			}
		}
	},
	Seeds: []directInput{
		{[]byte("NATS/1.0\r\nNats-Stream: KV_B\r\nNats-Subject: $KV.B.k\r\nNats-Sequence: 7\r\nNats-Time-Stamp: 2026-01-01T00:00:00Z\r\n\r\n"), []byte("v")},
		{[]byte("NATS/1.0 404 Message Not Found\r\n\r\n"), nil},
		{[]byte("NATS/1.0 408 Request Timeout\r\n\r\n"), nil},
		{[]byte("NATS/1.0\r\nNats-Sequence: 3\r\nKV-Operation: DEL\r\n\r\n"), nil},
		{[]byte("NATS/1.0\r\nNats-Sequence: 3\r\nKV-Operation: PURGE\r\n\r\n"), nil},
		{[]byte("NATS/1.0\r\nNats-Sequence: 3\r\nNats-Marker-Reason: MaxAge\r\n\r\n"), nil},
		{[]byte("NATS/1.0\r\nNats-Sequence: 3\r\nNats-Marker-Reason: Other\r\n\r\n"), []byte("x")},
		{[]byte("NATS/1.0\r\nNats-Sequence: x\r\n\r\n"), []byte("x")},
	},
	// The header bytes' length (two bytes), the header bytes, the body.
	Decode: func(b []byte) (directInput, bool) {
		if len(b) < 2 {
			return directInput{}, false
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return directInput{}, false
		}
		in := directInput{hdr: b[2 : 2+n], data: b[2+n:]}
		return in, in.msg() != nil
	},
	Encode: func(in directInput) []byte {
		return append(append(binary.LittleEndian.AppendUint16(nil, uint16(len(in.hdr))), in.hdr...), in.data...)
	},
}

// FuzzDirectEntry runs directEntryPair on the fuzzer's answers.
func FuzzDirectEntry(f *testing.F) { differential.Fuzz(f, directEntryPair) }
