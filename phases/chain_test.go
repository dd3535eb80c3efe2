package phases_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
)

// setResolver resolves the refs in its set.
type setResolver map[string]bool

func (r setResolver) Exists(_ context.Context, ref string) (bool, error) { return r[ref], nil }

// TestRealityAnchorDependencyFinal: a ref to a dependency's final artifact
// is left to EXECUTION (the capsule waits for the dependency after this
// phase); a final ref to any other capsule must resolve now.
func TestRealityAnchorDependencyFinal(t *testing.T) {
	t.Parallel()
	dep := "5a6a2b3c-0000-4000-8000-000000000001"
	other := "5a6a2b3c-0000-4000-8000-000000000002"
	for _, tc := range []struct {
		name      string
		dependsOn []string
		ref       string
		halt      string
	}{
		{"dependency's final", []string{dep}, "artifact:" + dep + "/final", ""},
		{"upper-case dependency", []string{"5A6A2B3C-0000-4000-8000-000000000001"}, "artifact:" + dep + "/final", ""},
		{"not a dependency", []string{dep}, "artifact:" + other + "/final", capsule.ContextRefMissing("artifact:" + other + "/final").String()},
		{"a dependency's cycle", []string{dep}, "artifact:" + dep + "/1", capsule.ContextRefMissing("artifact:" + dep + "/1").String()},
		{"no dependencies", nil, "artifact:" + dep + "/final", capsule.ContextRefMissing("artifact:" + dep + "/final").String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capsule.Capsule{ContextRefs: []string{tc.ref}, Target: "file:x", DependsOn: tc.dependsOn}
			env := &phases.Env{Resolver: setResolver{"file:x": true}}
			d := phases.RealityAnchor{}.Run(context.Background(), env, &phases.Input{Capsule: c, Checkpoint: &capsule.Checkpoint{}})
			if tc.halt == "" {
				require.Equal(t, phases.Advance, d.Action)
				return
			}
			require.Equal(t, phases.Halt, d.Action)
			require.Equal(t, tc.halt, d.Halt.String())
		})
	}
}
