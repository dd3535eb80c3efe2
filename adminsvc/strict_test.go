package adminsvc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDuplicateMembersRefused: a request naming a member twice, at any
// depth, is refused with bad_request, whatever the verb; encoding/json
// alone would keep the last one.
func TestDuplicateMembersRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ verb, data, member string }{
		{VerbPause, `{"id":"c1","by":"ann","id":"c2"}`, "id"},
		{VerbCancel, `{"id":"c1","by":"ann","by":"eve"}`, "by"},
		{VerbDecide, `{"id":"c1","decision":"reject","decision":"accept","by":"ann"}`, "decision"},
		{VerbReplay, `{"id":"c1","by":"ann","capsule":{"capsule_id":"a","capsule_id":"b"}}`, "capsule_id"},
		{VerbStatus, `{"id":"c1","id":"c2"}`, "id"},
		{VerbWaveSet, `{"wave_id":"w","by":"ann","tokens":1,"tokens":0}`, "tokens"},
	} {
		_, err := decodeRequest(tt.verb, []byte(tt.data), 0)
		var re *requestError
		require.ErrorAs(t, err, &re, tt.data)
		require.Equal(t, `request: member "`+tt.member+`" appears twice`, re.msg)
	}
	// The same name in sibling objects is no duplicate.
	_, err := decodeRequest(VerbReplay, []byte(`{"id":"c1","by":"ann","capsule":{"a":{"x":1},"b":{"x":2},"c":[{"x":1},{"x":2}]}}`), 0)
	require.NoError(t, err)
	require.Error(t, checkMembers([]byte(strings.Repeat("[", maxDepth+1)+strings.Repeat("]", maxDepth+1))))
}

// TestByStripsHiddenCharacters: by is recorded as a person reads it:
// bidirectional overrides and zero-width characters are removed, a by made
// of nothing else is no by, and one with control characters is refused.
func TestByStripsHiddenCharacters(t *testing.T) {
	t.Parallel()
	got, err := decodeRequest(VerbPause, []byte(`{"id":"c1","by":"\u202eann\u200b\u2066\ufeff"}`), 0)
	require.NoError(t, err)
	require.Equal(t, "ann", got.(PauseRequest).By)
	got, err = decodeRequest(VerbPhasePause, []byte(`{"phase":1,"by":"b\u200dob\u00ad"}`), 0)
	require.NoError(t, err)
	require.Equal(t, "bob", got.(PhaseRequest).By)
	_, err = decodeRequest(VerbCancel, []byte(`{"id":"c1","by":"\u200b\u202e"}`), 0)
	require.ErrorContains(t, err, "by is required")
	_, err = decodeRequest(VerbCancel, []byte(`{"id":"c1","by":"ann\u001b[2J"}`), 0)
	require.ErrorContains(t, err, "by contains control characters")
}

// FuzzCheckMembers: the duplicate check never panics, refuses only with
// bad_request, and a refusal that is not about a duplicate or the depth is
// one encoding/json makes too.
func FuzzCheckMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `{"a":{"b":1},"b":{"b":2}}`, `[{"a":1},{"a":1}]`, `{"a":[1,{"a":1}]}`, `{"a"`, `[]]`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkMembers(data)
		var v any
		jerr := json.Unmarshal(data, &v)
		if err == nil {
			return // a stream of values passes the walk; strict refuses what follows the first
		}
		var re *requestError
		if !errors.As(err, &re) {
			t.Fatalf("refusal %v is no bad_request", err)
		}
		if strings.Contains(re.msg, "appears twice") || strings.Contains(re.msg, "nested deeper") {
			return
		}
		if jerr == nil {
			t.Fatalf("checkMembers refused %q (%v), encoding/json accepts it", data, err)
		}
	})
}
