package compose

import "context"

// PublishingNow is the claim a new run's record holds while its compose
// request publishes the steps.
const PublishingNow = publishingNow

// SetPublishHook makes the service run h before it publishes each step.
func SetPublishHook(c *Config, h func(ctx context.Context, i int)) { c.publishHook = h }
