package capsule_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// addExampleCapsules seeds f with every example capsule, valid and not.
func addExampleCapsules(f *testing.F) {
	files, err := filepath.Glob("../examples/capsules/*.*")
	require.NoError(f, err)
	require.NotEmpty(f, files)
	for _, name := range files {
		b, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(b)
	}
}

// FuzzDecodeCapsule: the strict parse behind RECEPTION's digest and schema
// check never panics and fails only with ErrInvalidJSON; whatever it
// accepts as an object seals into a capsule whose integrity verifies, with
// the same digest; and whatever decodes into a Capsule re-encodes to a fixed
// point. Seeds: the example capsules and testdata/fuzz/FuzzDecodeCapsule.
func FuzzDecodeCapsule(f *testing.F) {
	addExampleCapsules(f)
	f.Add([]byte(`{"integrity":{"sha256":"00"},"a":[1,2.50,-0,1e400]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := capsule.ParseJSON(raw)
		if err != nil {
			require.ErrorIs(t, err, capsule.ErrInvalidJSON)
			require.ErrorIs(t, capsule.VerifyIntegrity(raw), capsule.ErrInvalidJSON)
		} else if _, ok := v.(map[string]any); ok {
			digest, derr := capsule.Digest(raw)
			sealed, serr := capsule.Seal(raw)
			require.Equal(t, derr == nil, serr == nil, "Digest %v, Seal %v", derr, serr)
			if derr != nil {
				// Only a number beyond float64 makes a parsed object undigestible.
				require.ErrorIs(t, derr, capsule.ErrInvalidJSON)
			} else {
				require.NoError(t, capsule.VerifyIntegrity(sealed), "sealed: %s", sealed)
				again, err := capsule.Digest(sealed)
				require.NoError(t, err)
				require.Equal(t, digest, again, "sealing changed the digest")
				if verr := capsule.VerifyIntegrity(raw); verr != nil {
					require.ErrorIs(t, verr, capsule.ErrIntegrityMismatch)
				}
			}
		}

		var c capsule.Capsule
		if json.Unmarshal(raw, &c) != nil {
			return
		}
		once, err := json.Marshal(&c)
		if err != nil {
			return // a time outside [0, 9999] decodes but does not encode
		}
		var c2 capsule.Capsule
		require.NoError(t, json.Unmarshal(once, &c2), "%s", once)
		twice, err := json.Marshal(&c2)
		require.NoError(t, err)
		require.Equal(t, string(once), string(twice))
	})
}

// FuzzDecodeEvents: DecodeEvents never panics, fails only with
// ErrInvalidEvents, returns only events with a kind, and what it returns
// encodes and decodes back to the same events. Seeds: below and
// testdata/fuzz/FuzzDecodeEvents.
func FuzzDecodeEvents(f *testing.F) {
	for _, s := range []string{
		`[{"id":"k/0/0/received","kind":"received","capsule_id":"c","key":"k","phase":0,"phase_name":"RECEPTION","cycle":0,"at":"2026-01-01T00:00:00Z"}]`,
		`{"id":"x","kind":"paused","key":"k","detail":"operator_manual","by":"me","findings":[{"rule":9,"message":"m"}],"at":"2026-01-01T00:00:00.5+02:00"}`,
		`[{"id":"composition.p.c.run1.step0.ended","kind":"composition_step_ended","capsule_id":"c","key":"composition.p.c","step":0,"step_name":"draft","round":2,"artifact":"artifact:c/1","at":"2026-01-01T00:00:00Z"}]`,
		`null`, `[null]`, `[]`, `{}`, ` [ {"kind":"halted"} ] `, `"received"`, `[{"kind":1}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := capsule.DecodeEvents(data)
		if err != nil {
			require.ErrorIs(t, err, capsule.ErrInvalidEvents)
			require.Nil(t, evs)
			return
		}
		for _, ev := range evs {
			require.NotEmpty(t, ev.Kind)
		}
		b, err := json.Marshal(evs)
		if err != nil {
			return // a time outside [0, 9999] decodes but does not encode
		}
		again, err := capsule.DecodeEvents(b)
		require.NoError(t, err, "%s", b)
		require.Len(t, again, len(evs))
		b2, err := json.Marshal(again)
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2))
	})
}

// FuzzDecodeCheckpoint: a checkpoint as sagad reads one from the KV bucket
// (encoding/json) never panics the hand-written encoder, which writes
// byte for byte what encoding/json writes, and fails exactly when it does;
// the encoding decodes back to itself. Seeds: below and
// testdata/fuzz/FuzzDecodeCheckpoint.
func FuzzDecodeCheckpoint(f *testing.F) {
	full := `{"schema_version":"1.0","capsule_id":"c","key":"k","trace_id":"t<&>","wave_id":"w","digest":"d","constitution":"2026.11.3+0123abcd","intake_seq":42,"outcome_emitted":true,` +
		`"created_at":"2026-11-22T07:08:09.123456789Z","updated_at":"2026-11-22T07:08:10+01:00",` +
		`"state":{"phase":5,"phase_name":"REVIEW","progress":71,"cycle":2,"status":"halted","halt_reason":"max_cycles_exceeded:3",` +
		`"budget_used":{"tokens":12,"dollars":1e-7},"locks_held":["a","b\"c"],"artifact_refs":[],"findings":[{"rule":9,"title":"x","field":"f","message":"m\n","source":"operator"}],"operator_answer":{"text":"licence is MIT","by":"ann","at":"2026-11-22T07:08:09Z"},` +
		`"pause":{"trigger":"operator_manual","reason":"r","by":"me","at":"2026-11-22T07:08:09Z","resume_token":"tok"},"warned":["budget_warning"],"awaiting_cycle":2,` +
		`"attempt_log":[{"phase":4,"cycle":1,"attempt":1,"exit_code":12,"error":"e","decision":"retry","at":"2026-11-22T07:08:09Z"},{"phase":5,"cycle":2,"attempt":3,"timeout":true,"error":"","decision":"halt","at":"2026-11-22T07:08:09+01:00"}]},` +
		`"history":[{"phase":0,"phase_name":"RECEPTION","cycle":0,"outcome":"passed","detail":"\u2028\u0001","at":"2026-11-22T07:08:09Z"}]}`
	for _, s := range []string{full, `{}`, `null`, `{"child_limit":{"max_attempts":2,"wall_until":"2026-11-22T07:08:09+01:00"}}`, `{"child_limit":{}}`, `{"child_limit":{"wall_until":"2026-11-22T07:08:09.5Z"}}`, `{"history":[]}`, `{"created_at":"0000-01-01T00:00:00-00:01"}`, `{"state":{"budget_used":{"dollars":1e308}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cp := new(capsule.Checkpoint)
		if json.Unmarshal(data, cp) != nil {
			return
		}
		want, werr := json.Marshal(cp)
		got, gerr := cp.AppendJSON(nil)
		require.Equal(t, werr == nil, gerr == nil, "encoding/json: %v, AppendJSON: %v", werr, gerr)
		if werr != nil {
			return
		}
		require.Equal(t, string(want), string(got))
		back := new(capsule.Checkpoint)
		require.NoError(t, json.Unmarshal(got, back), "%s", got)
		again, err := back.AppendJSON(nil)
		require.NoError(t, err)
		require.Equal(t, string(got), string(again))
		require.True(t, reflect.DeepEqual(back.Clone(), back), "Clone differs from the checkpoint")
	})
}

// FuzzAgentQueryCheck holds what an agent's question may carry into a
// checkpoint and make sagad publish: whatever it sends, a question that
// passes names a literal subject outside sagad's, the server's and the
// agents' own, and carries bounded UTF-8.
func FuzzAgentQueryCheck(f *testing.F) {
	for _, s := range [][3]string{
		{"q1", "_INBOX.abc.1", "which licence?"},
		{"q2", "saga.admin.cancel", "x"},
		{"q3", "$JS.API.STREAM.DELETE.SAGA_PHASE_4", ""},
		{"q4", "agents.prompt.other.ann.s1", "hi"},
		{"q5", "_INBOX.>", "?"},
		{"", "a..b", "\xff"},
		{"q6", "reply with space", "é"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, id, subject, prompt string) {
		q := capsule.AgentQuery{ID: id, ReplySubject: subject, Prompt: prompt}
		if q.Check() != nil {
			return
		}
		if q.ID == "" || len(q.ID) > capsule.MaxQueryID || len(q.Prompt) > capsule.MaxQueryPrompt || !utf8.ValidString(q.Prompt) {
			t.Fatalf("passed with id %q, prompt of %d bytes", q.ID, len(q.Prompt))
		}
		if strings.ContainsAny(subject, "*> \t\r\n") || strings.Contains(subject, "..") || strings.HasPrefix(subject, ".") ||
			strings.HasSuffix(subject, ".") || (strings.HasPrefix(subject, "saga.") && !strings.HasPrefix(subject, capsule.AgentAnswerSpace)) || strings.HasPrefix(subject, "$") ||
			strings.HasPrefix(subject, "agents.") {
			t.Fatalf("passed with reply subject %q", subject)
		}
	})
}
