package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/corrupt"
)

// FuzzDecodeCheckpoint: the decoder of SAGA_CHECKPOINTS values never
// panics; whatever it refuses is a corrupt.Error; whatever it takes is a
// checkpoint of the key asked for.
func FuzzDecodeCheckpoint(f *testing.F) {
	ours, err := NewCheckpoint("k1", "k1", "t", "", "d", time.Unix(1_700_000_000, 0).UTC()).AppendJSON(nil)
	require.NoError(f, err)
	for _, s := range []string{
		string(ours), strings.Replace(string(ours), `"k1"`, `"k2"`, 1), `{}`, `{"stream":"SAGA_INTAKE","seq":7}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 0"}}`,
		"\x00garbage\xff", `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := DecodeCheckpoint("k1", 3, b)
		if err != nil {
			var e *corrupt.Error
			require.True(t, errors.As(err, &e))
			require.Equal(t, corrupt.Checkpoints, e.Bucket)
			require.Equal(t, uint64(3), e.Revision)
			return
		}
		require.Equal(t, "k1", cp.Key)
		require.NotEmpty(t, cp.SchemaVersion)
	})
}

// TestDecodeCheckpointRefusesAcks: JetStream's answers to a publish decode
// into an empty checkpoint with encoding/json; they are no checkpoint.
func TestDecodeCheckpointRefusesAcks(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`{"stream":"SAGA_INTAKE","seq":7}`, `{"error":{"code":400}}`, `{}`, "garbage"} {
		_, err := DecodeCheckpoint("k1", 1, []byte(s))
		require.ErrorIs(t, err, corrupt.ErrCorrupt, s)
	}
}
