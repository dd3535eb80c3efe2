package agentproto

import (
	"errors"
	"testing"
)

// The decoders of this package take bytes an agent sent: none may panic,
// and each either returns a value or an error wrapping ErrMalformed.

func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		``, `{"type":"status","data":"ack"}`, `{"type":"response","data":"x"}`,
		`{"type":"response","data":{"text":"x","attachments":[{"filename":"a","content":"eA=="}]}}`,
		`{"type":"query","data":{"id":"q","reply_subject":"_INBOX.a","prompt":"?"}}`,
		`{"type":"x"}`, `plain`, `{"type":"status","data":"cost:{\"turn_cost_usd\":1}"}`,
	} {
		f.Add([]byte(s), false, "", "")
	}
	f.Add([]byte(nil), true, "500", "boom")
	f.Fuzz(func(t *testing.T, data []byte, headers bool, code, desc string) {
		fr, err := DecodeFrame(data, headers, code, desc)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if fr.Kind == FrameChunk && fr.Chunk.Type == TypeQuery && (fr.Chunk.Query == nil || !LiteralSubject(fr.Chunk.Query.ReplySubject)) {
			t.Fatalf("query without a literal reply subject: %+v", fr.Chunk.Query)
		}
		if fr.Kind == FrameError && (fr.Code < 100 || fr.Code > 999 || len(fr.Description) > MaxErrorDescription+4) {
			t.Fatalf("error frame out of bounds: %+v", fr)
		}
	})
}

func FuzzParseStatusUsage(f *testing.F) {
	for _, s := range []string{`ack`, `cost:{"turn_cost_usd":0.1}`, `usage:{"input_tokens":1,"output_tokens":2}`, `usage:{"input_tokens":1e300}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, ok := ParseStatusUsage(s)
		if ok && (u.Tokens < 0 || u.Dollars < 0 || u.Dollars != u.Dollars) {
			t.Fatalf("usage out of bounds: %+v", u)
		}
	})
}

func FuzzDecodeInfo(f *testing.F) {
	f.Add([]byte(`{"name":"agents","id":"I","metadata":{"agent":"a","owner":"o","protocol_version":"0.3"},"endpoints":[{"name":"prompt","subject":"agents.prompt.a.o.s","metadata":{"max_payload":"1MB","attachments_ok":"true"}}]}`))
	f.Add([]byte(`{"name":"other"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		inst, ok, err := DecodeInfo(data)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		if ok && !LiteralSubject(inst.PromptSubject) {
			t.Fatalf("prompt subject %q is not literal", inst.PromptSubject)
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add([]byte(`{"agent":"a","owner":"o","session":"s","instance_id":"I","ts":"2026-01-01T00:00:00Z","interval_s":30}`))
	f.Add([]byte(`{"instance_id":"I","interval_s":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHeartbeat(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if h.Interval() <= 0 {
			t.Fatalf("interval %v", h.Interval())
		}
	})
}
