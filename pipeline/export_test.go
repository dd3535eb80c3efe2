package pipeline

import (
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// CacheOf exposes the process's cache to tests that plant in it what
// another capsule under the same key, or a stale process, would leave.
func CacheOf(p *Pipeline) *store.Cache { return p.st.Cache }

// PhasePaused reports whether p's view of phase pauses holds ph paused.
func PhasePaused(p *Pipeline, ph capsule.Phase) bool { return p.pauses.isPaused(ph) }
