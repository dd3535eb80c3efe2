package maintenance

import (
	"context"
	"errors"
	"slices"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// maxCycleNodes bounds the capsules one search for a dependency cycle
// reads: a wait graph larger than that is left to the dependency timeout.
const maxCycleNodes = 256

// errCycleSearchTooLarge: the search met more than maxCycleNodes capsules.
var errCycleSearchTooLarge = errors.New("dependency graph too large to search")

// dependencyCycle returns the sorted keys of the dependency cycle the
// waiting capsule key (waiting for waitingFor) belongs to, or nil when it
// belongs to none. The cycle is the strongly connected component of key in
// the graph of capsules that wait for their dependencies (edges: what each
// still waits for) — the same set whichever member asks, so every member
// halts with the same reason and two sagads agree. A member that already
// halted dependency_cycle keeps its edges (its depends_on), so the members
// swept after it still find the whole cycle.
func (w *Sweeper) dependencyCycle(ctx context.Context, key string, waitingFor []string) ([]string, error) {
	edges := map[string][]string{key: waitingFor}
	order := []string{key}
	for i := 0; i < len(order); i++ {
		for _, next := range edges[order[i]] {
			if _, seen := edges[next]; seen {
				continue
			}
			if len(order) == maxCycleNodes {
				return nil, errCycleSearchTooLarge
			}
			out, err := w.waitEdges(ctx, next)
			if err != nil {
				return nil, err
			}
			edges[next] = out
			order = append(order, next)
		}
	}
	// The component: the capsules reached from key that reach key back.
	reaches := map[string]bool{key: true}
	for changed := true; changed; {
		changed = false
		for _, n := range order {
			if reaches[n] {
				continue
			}
			for _, m := range edges[n] {
				if reaches[m] {
					reaches[n], changed = true, true
					break
				}
			}
		}
	}
	if len(reaches) < 2 {
		return nil, nil
	}
	cycle := make([]string, 0, len(reaches))
	for n := range reaches {
		cycle = append(cycle, n)
	}
	slices.Sort(cycle)
	return cycle, nil
}

// waitEdges are the capsules key waits for: what it still waits for when it
// waits for its dependencies, its depends_on when it halted in a
// dependency cycle, and none otherwise (a capsule that runs, ended or is
// unknown closes no cycle).
func (w *Sweeper) waitEdges(ctx context.Context, key string) ([]string, error) {
	if !store.ValidKey(key) {
		return nil, nil
	}
	cp, _, err := w.st.Checkpoints.GetLatest(ctx, key, nil) // it decides a halt
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	switch st := cp.State; {
	case st.Status == capsule.Waiting:
		if info, _ := st.ParkedBy(); info.Watch == capsule.WatchDependencies {
			return st.WaitingFor, nil
		}
	case st.Status == capsule.Halted && capsule.ParseHaltReason(st.HaltReason).Code == capsule.CodeDependencyCycle:
		_, c, err := w.st.Raw(ctx, key)
		if err != nil || c == nil {
			return nil, nil // its bytes are gone: it closes no cycle now
		}
		var out []string
		for _, d := range c.DependsOn {
			if id, ok := capsule.CanonicalID(d); ok && id != key {
				out = append(out, id)
			}
		}
		return out, nil
	}
	return nil, nil
}
