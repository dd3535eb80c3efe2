package compose

import (
	"context"
	"time"

	"github.com/sagad/sagad/store"
)

// PublishingNow is the claim a new run's record holds while its compose
// request publishes the steps.
const PublishingNow = publishingNow

// SetPublishHook makes the service run h before it publishes each step.
func SetPublishHook(c *Config, h func(ctx context.Context, i int)) { c.publishHook = h }

// UpdateRecord changes a run's record outside the machine: a test's way
// to a state (a corrupt or an unusual record).
func UpdateRecord(ctx context.Context, st *store.Store, id, producer string, run int, change func(*Record) error) (*Record, error) {
	return updateRecord(ctx, st, runKey{id, producer, run}, change)
}

// SetOrphanScan sets how often the republisher reads the records though
// it knows of no backlog.
func SetOrphanScan(c *Config, d time.Duration) { c.orphanScan = d }
