package daemon

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Values of the embedded server's sync policy ([Config.Sync]).
const (
	// SyncAlways fsyncs every write before it is acknowledged.
	SyncAlways = "always"
	// SyncServerDefault keeps nats-server's own default, an fsync every
	// two minutes.
	SyncServerDefault = "default"
	// DefaultSync is sagad's default: an acknowledged write is on disk
	// within a second.
	DefaultSync = "1s"
)

// ApplySync sets the sync policy on an embedded server's options: "always",
// "default" (the server's 2 minutes) or a Go duration such as "1s", the
// longest an acknowledged write waits in the page cache before an fsync.
func ApplySync(o *server.Options, policy string) error {
	switch policy {
	case SyncAlways:
		o.SyncAlways = true
	case SyncServerDefault:
		o.SyncAlways, o.SyncInterval = false, 0
	default:
		d, err := time.ParseDuration(policy)
		if err != nil || d <= 0 {
			return fmt.Errorf("sync %q: want always, default or a positive duration such as 1s", policy)
		}
		o.SyncAlways, o.SyncInterval = false, d
	}
	return nil
}
