package admin

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func TestIdentityFindings(t *testing.T) {
	t.Parallel()
	orig := func() *capsule.Capsule {
		return &capsule.Capsule{CapsuleID: "c-1", ProducerAgentID: "coder", WaveID: "w-1",
			Chain: &capsule.ChainRound{ID: "ch", Step: 1, Round: 2, Findings: []capsule.Finding{{Message: "fix it"}}}}
	}
	for _, tc := range []struct {
		name   string
		change func(c *capsule.Capsule)
		want   []string // the fields named, in order
	}{
		{"the work changed only", func(c *capsule.Capsule) { c.Target = "file:other"; c.Task.Title = "new" }, nil},
		{"a parent added", func(c *capsule.Capsule) { c.ParentCapsuleID = "p-1" }, []string{"parent_capsule_id"}},
		{"another id", func(c *capsule.Capsule) { c.CapsuleID = "c-2" }, []string{"capsule_id"}},
		{"another producer agent", func(c *capsule.Capsule) { c.ProducerAgentID = "mallory" }, []string{"producer_agent_id"}},
		{"out of the wave", func(c *capsule.Capsule) { c.WaveID = "" }, []string{"wave_id"}},
		{"another chain step", func(c *capsule.Capsule) { c.Chain.Step = 0 }, []string{"chain"}},
		{"the round's verifier findings dropped", func(c *capsule.Capsule) { c.Chain.Findings = nil }, []string{"chain"}},
		{"out of the chain", func(c *capsule.Capsule) { c.Chain = nil }, []string{"chain"}},
		{"everything", func(c *capsule.Capsule) {
			c.CapsuleID, c.ParentCapsuleID, c.Chain, c.ProducerAgentID, c.WaveID = "x", "p", nil, "m", "w-2"
		}, []string{"capsule_id", "parent_capsule_id", "chain", "producer_agent_id", "wave_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := orig()
			tc.change(c)
			var got []string
			for _, f := range identityFindings(orig(), c) {
				got = append(got, f.Field)
				require.Contains(t, f.Message, "a correction keeps who the capsule is")
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestCheckpointIdentity: with the bytes gone, the checkpoint's record of
// the capsule holds a correction to its parent, chain and wave.
func TestCheckpointIdentity(t *testing.T) {
	t.Parallel()
	cp := &capsule.Checkpoint{CapsuleID: "c-1", WaveID: "w-1", Parent: "p-1", Chain: &capsule.ChainStep{ID: "ch", Step: 1}}
	same := &capsule.Capsule{CapsuleID: "c-1", WaveID: "w-1", ParentCapsuleID: "p-1", ProducerAgentID: "any",
		Chain: &capsule.ChainRound{ID: "ch", Step: 1, Round: 3}}
	require.Empty(t, identityFindings(checkpointIdentity(cp, same), same))
	moved := *same
	moved.ParentCapsuleID, moved.WaveID = "", "w-2"
	var got []string
	for _, f := range identityFindings(checkpointIdentity(cp, &moved), &moved) {
		got = append(got, f.Field)
	}
	require.Equal(t, []string{"parent_capsule_id", "wave_id"}, got)
}
