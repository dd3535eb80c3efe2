package capsule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func TestPhasePauseOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 19, 0, 0, 500, time.UTC)
	written := capsule.PhasePause{By: "alice", Reason: "storage maintenance", At: at}.SetMetadata(map[string]string{"_nats.ver": "2.12"})
	for _, tc := range []struct {
		name    string
		md      map[string]string
		want    capsule.PhasePause
		found   bool
		wantErr bool
	}{
		{name: "none", md: map[string]string{"_nats.ver": "2.12"}},
		{name: "nil", md: nil},
		{name: "written", md: written, want: capsule.PhasePause{By: "alice", Reason: "storage maintenance", At: at}, found: true},
		{name: "at only", md: map[string]string{capsule.PhasePauseAtKey: "2026-11-28T19:00:00Z"}, want: capsule.PhasePause{At: at.Truncate(time.Second)}, found: true},
		{name: "bad time", md: map[string]string{capsule.PhasePauseAtKey: "yesterday"}, wantErr: true},
		{name: "by not UTF-8", md: map[string]string{capsule.PhasePauseAtKey: "2026-11-28T19:00:00Z", capsule.PhasePauseByKey: "\xff"}, wantErr: true},
		{name: "reason too long", md: map[string]string{capsule.PhasePauseAtKey: "2026-11-28T19:00:00Z", capsule.PhasePauseReasonKey: strings.Repeat("x", capsule.MaxPhasePauseText+1)}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, found, err := capsule.PhasePauseOf(tc.md)
			if tc.wantErr {
				require.ErrorIs(t, err, capsule.ErrInvalidPhasePause)
				require.False(t, found)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.found, found)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestClearPhasePause(t *testing.T) {
	t.Parallel()
	md := capsule.PhasePause{By: "alice", At: time.Now()}.SetMetadata(map[string]string{"_nats.ver": "2.12"})
	require.True(t, capsule.ClearPhasePause(md))
	require.Equal(t, map[string]string{"_nats.ver": "2.12"}, md)
	require.False(t, capsule.ClearPhasePause(md))
	// An empty by or reason leaves no key behind.
	md = capsule.PhasePause{At: time.Now()}.SetMetadata(nil)
	require.Len(t, md, 1)
}

func TestPhasePausedAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC)
	recorded := now.Add(-time.Hour)
	until := now.Add(-2 * time.Hour).Add(capsule.PhasePauseHorizon)
	soon := now.Add(time.Minute)
	md := capsule.PhasePause{At: recorded}.SetMetadata(nil)
	require.Equal(t, recorded, capsule.PhasePausedAt(md, &until, now), "the record wins")
	require.Equal(t, now.Add(-2*time.Hour), capsule.PhasePausedAt(nil, &until, now), "else pause_until less the horizon")
	require.Equal(t, now.Add(-2*time.Hour), capsule.PhasePausedAt(map[string]string{capsule.PhasePauseAtKey: "x"}, &until, now), "a record that does not read is ignored")
	require.True(t, capsule.PhasePausedAt(nil, &soon, now).IsZero(), "a short pause is no operator's")
	require.True(t, capsule.PhasePausedAt(nil, nil, now).IsZero())
}

// FuzzPhasePauseOf: a consumer's metadata, which anyone allowed to update
// the consumer writes, never panics the reader; what it accepts is UTF-8
// within the bound and survives being written back.
func FuzzPhasePauseOf(f *testing.F) {
	f.Add("2026-11-28T19:00:00.5Z", "alice", "storage maintenance")
	f.Add("2026-11-28T19:00:00+02:00", "", "")
	f.Add("not a time", "bob", "x")
	f.Add("2026-11-28T19:00:00Z", "\xff", "")
	f.Fuzz(func(t *testing.T, at, by, reason string) {
		md := map[string]string{capsule.PhasePauseAtKey: at, capsule.PhasePauseByKey: by, capsule.PhasePauseReasonKey: reason}
		p, found, err := capsule.PhasePauseOf(md)
		if err != nil {
			require.ErrorIs(t, err, capsule.ErrInvalidPhasePause)
			return
		}
		require.True(t, found)
		require.LessOrEqual(t, len(p.By), capsule.MaxPhasePauseText)
		again, found, err := capsule.PhasePauseOf(p.SetMetadata(nil))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, p, again)
	})
}
