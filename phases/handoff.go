package phases

import "context"

// Handoff is phase 6: the pipeline writes the final checkpoint at 100 % and
// emits the completed capsule with its artifact refs.
type Handoff struct{}

// Run always advances; completion is recorded by the pipeline.
func (Handoff) Run(context.Context, *Env, *Input) Decision { return AdvanceWith() }
