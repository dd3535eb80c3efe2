package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

func TestClaimedRoundTrip(t *testing.T) {
	t.Parallel()
	ex := &capsule.ExecutionClaim{Cycle: 2, Holder: "sagad-1/AbC123", ExpiresAt: time.Unix(1_700_000_000, 123).UTC()}
	v, ok := store.EncodeClaimed(ex)
	require.True(t, ok)
	require.Equal(t, "1700000000000000123:sagad-1/AbC123", v)
	c, err := store.DecodeClaimed(v)
	require.NoError(t, err)
	require.Equal(t, &store.Claimed{Holder: ex.Holder, ExpiresAt: ex.ExpiresAt}, c)

	none, err := store.DecodeClaimed("")
	require.NoError(t, err)
	require.Nil(t, none)
	for _, bad := range []*capsule.ExecutionClaim{nil, {Holder: "a b", ExpiresAt: ex.ExpiresAt}, {Holder: "", ExpiresAt: ex.ExpiresAt}, {Holder: "h"}} {
		_, ok := store.EncodeClaimed(bad)
		require.False(t, ok, "%+v", bad)
	}
}

func TestDecodeClaimedRefuses(t *testing.T) {
	t.Parallel()
	for _, v := range []string{
		"x", "5", "5:", ":h", "0:h", "-5:h", "05:h", "+5:h", "5:a b", "5:h\x00", "5:é", "99999999999999999999:h",
		"5:" + strings.Repeat("h", 257),
	} {
		_, err := store.DecodeClaimed(v)
		require.ErrorIs(t, err, store.ErrBadClaimed, "%q", v)
	}
}

// FuzzDecodeClaimed: whatever a Saga-Claim header says, the decoder either
// refuses it with ErrBadClaimed or returns a holder and a positive time
// that encode back to the same header.
func FuzzDecodeClaimed(f *testing.F) {
	for _, s := range []string{"", "1700000000000000123:sagad-1/AbC123", "5:h", "5:", "x", "05:h", "5:a:b", "5:a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, err := store.DecodeClaimed(v)
		if err != nil {
			if !errors.Is(err, store.ErrBadClaimed) {
				t.Fatalf("%q: %v is no ErrBadClaimed", v, err)
			}
			return
		}
		if c == nil {
			if v != "" {
				t.Fatalf("%q: nothing decoded", v)
			}
			return
		}
		got, ok := store.EncodeClaimed(&capsule.ExecutionClaim{Holder: c.Holder, ExpiresAt: c.ExpiresAt})
		if !ok || got != v {
			t.Fatalf("%q encodes back as %q (%v)", v, got, ok)
		}
	})
}
