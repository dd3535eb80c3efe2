package locks

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeLease: the decoder of SAGA_LOCKS values never panics, refuses
// what sagad never writes (JetStream's answers, another path's lease), and
// takes back every lease sagad writes.
func FuzzDecodeLease(f *testing.F) {
	now := time.Unix(1_700_000_000, 0).UTC()
	ours, err := json.Marshal(&lease{Path: "src/a.go", Holder: "k", Owner: "h/1", AcquiredAt: now, ExpiresAt: now.Add(time.Minute)})
	require.NoError(f, err)
	for _, s := range []string{
		string(ours), `{}`, `{"stream":"SAGA_INTAKE","seq":7}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 0"}}`,
		`{"path":"other","holder":"k","owner":"o","expires_at":"2030-01-01T00:00:00Z"}`,
		"\x00garbage\xff", `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeLease("src/a.go", b)
		if err != nil {
			return
		}
		require.Equal(t, "src/a.go", l.Path)
		again, err := json.Marshal(l)
		require.NoError(t, err)
		_, err = decodeLease("src/a.go", again)
		require.NoError(t, err)
	})
}
