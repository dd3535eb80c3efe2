package daemon

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

func TestApplySync(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy     string
		wantAlways bool
		wantEvery  time.Duration
		wantErr    bool
	}{
		{policy: "always", wantAlways: true},
		{policy: "1s", wantEvery: time.Second},
		{policy: "250ms", wantEvery: 250 * time.Millisecond},
		{policy: "default"},
		{policy: "0s", wantErr: true},
		{policy: "-1s", wantErr: true},
		{policy: "often", wantErr: true},
		{policy: "", wantErr: true},
	}
	for _, tt := range tests {
		o := &server.Options{SyncInterval: time.Hour}
		err := ApplySync(o, tt.policy)
		if tt.wantErr {
			require.Error(t, err, tt.policy)
			continue
		}
		require.NoError(t, err, tt.policy)
		require.Equal(t, tt.wantAlways, o.SyncAlways, tt.policy)
		if !tt.wantAlways {
			require.Equal(t, tt.wantEvery, o.SyncInterval, tt.policy)
		}
	}
}

// TestEmbeddedServerSyncsEverySecond: sagad's embedded server runs with the
// configured policy (1s unless told otherwise).
func TestEmbeddedServerSyncsEverySecond(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		sync       string
		wantAlways bool
		wantEvery  time.Duration
	}{{"1s", false, time.Second}, {"always", true, 0}, {"default", false, 2 * time.Minute}} {
		cfg := testConfig(t, t.TempDir())
		cfg.Sync = tt.sync
		ns, err := startEmbedded(cfg)
		require.NoError(t, err)
		js := ns.JetStreamConfig()
		ns.Shutdown()
		ns.WaitForShutdown()
		require.NotNil(t, js)
		require.Equal(t, tt.wantAlways, js.SyncAlways, tt.sync)
		if !tt.wantAlways {
			require.Equal(t, tt.wantEvery, js.SyncInterval, tt.sync)
		}
	}
}
