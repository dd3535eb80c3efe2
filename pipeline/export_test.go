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

// WithoutMemo makes the pipeline's deferred catch-ups run every phase
// again, the routine the memo of deferred decisions replaces (memo.go).
func WithoutMemo(c *Config) { c.noMemo = true }

// CaughtUpRuns is how many times the pipeline's deferred catch-ups ran
// phase ph, rather than take its decision from the memo.
func CaughtUpRuns(p *Pipeline, ph capsule.Phase) int64 { return p.caughtUp[ph].Load() }

// MemoLen is how many deferred decisions the pipeline's memo holds.
func MemoLen(p *Pipeline) int { return p.memo.len() }

// AdvancesLen is how many applied advances the pipeline's memo of them
// holds (advances.go).
func AdvancesLen(p *Pipeline) int { return p.advances.len() }
