package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckServerVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		version string
		ok      bool
		tooOld  bool
	}{
		{"2.11.0", true, false},
		{"2.15.2", true, false},
		{"v2.11.1", true, false},
		{"3.0.0", true, false},
		{"2.12.0-RC.1", true, false},
		{"2.10.29", true, true},
		{"2.9.0", true, true},
		{"1.99.99", true, true},
		{"2.11.0-beta", true, false},
		{"", false, false},
		{"dev", false, false},
		{"2.11", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			t.Parallel()
			ok, err := checkServerVersion(tt.version)
			require.Equal(t, tt.ok, ok)
			if tt.tooOld {
				require.ErrorIs(t, err, ErrServerTooOld)
				require.ErrorContains(t, err, "the server runs "+tt.version+", sagad needs 2.11.0 or later")
				return
			}
			require.NoError(t, err)
		})
	}
}
