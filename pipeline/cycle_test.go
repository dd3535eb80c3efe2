package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
)

// TestDependencyCycle: capsules that wait for each other, two or three in a
// ring, all halt dependency_cycle with the same sorted id list, whichever
// sagad sweeps them first; a capsule that merely depends on a member halts
// dependency_failed:<member>.
func TestDependencyCycle(t *testing.T) {
	t.Parallel()
	change := func(c *pipeline.Config) {
		c.SweepInterval = 50 * time.Millisecond
		c.DependencyTimeout = time.Hour // a cycle is not a timeout
	}
	f := setupWith(t, change)
	cfg := f.cfg
	change(&cfg)
	f.bundle.Start(t, cfg) // a second sagad sweeps the same capsules

	a, b := capsuletest.NewID(), capsuletest.NewID()
	x, y, z := capsuletest.NewID(), capsuletest.NewID(), capsuletest.NewID()
	doc := func(id string, deps ...string) capsuletest.Doc {
		l := make([]any, len(deps))
		for i, d := range deps {
			l[i] = d
		}
		return f.own(t, capsuletest.New().Set("capsule_id", id).Set("depends_on", l))
	}
	outside := capsuletest.NewID()
	docs := []capsuletest.Doc{
		doc(a, b), doc(b, a),
		doc(x, y), doc(y, z), doc(z, x),
		doc(outside, a),
	}
	for _, d := range docs {
		f.publish(t, d.Sealed(t))
	}
	for _, ring := range [][]string{{a, b}, {x, y, z}} {
		want := capsule.DependencyCycle(ring).String()
		for _, id := range ring {
			s := f.wait(t, id)
			require.Equal(t, capsule.Halted, s.State)
			require.Equal(t, want, s.HaltReason, "every member halts with the whole cycle")
		}
	}
	s := f.wait(t, outside)
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.DependencyFailed(a).String(), s.HaltReason, "outside the cycle: its dependency failed")
}
