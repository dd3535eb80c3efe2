package capsule_test

import (
	"encoding/json"
	"os"
	"path/filepath"
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
