package admin

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sagad/sagad/capsule"
)

// identityFindings are the fields by which corrected differs from orig in
// who the capsule is, rather than in its work: the id, the delegation
// link (parent_capsule_id, which RECEPTION takes only with the parent
// call's token), the chain object (sagad's to give, rounds and verifier
// findings included), the producer agent and the wave (whose caps and
// admission it was judged by). A correction may change the work, never
// these: a replay carries no token, no compose reply and no admission
// that could vouch for a new identity. The result is in that field order.
func identityFindings(orig, corrected *capsule.Capsule) []capsule.Finding {
	var out []capsule.Finding
	differ := func(field, was, now string) {
		out = append(out, capsule.Finding{Field: field, Message: fmt.Sprintf(
			"a correction keeps who the capsule is: the capsule's is %s, the correction's %s", was, now)})
	}
	if orig.CapsuleID != corrected.CapsuleID {
		differ("capsule_id", quoteOrNone(orig.CapsuleID), quoteOrNone(corrected.CapsuleID))
	}
	if orig.ParentCapsuleID != corrected.ParentCapsuleID {
		differ("parent_capsule_id", quoteOrNone(orig.ParentCapsuleID), quoteOrNone(corrected.ParentCapsuleID))
	}
	if a, b := chainJSON(orig.Chain), chainJSON(corrected.Chain); !bytes.Equal(a, b) {
		differ("chain", orNone(a), orNone(b))
	}
	if orig.ProducerAgentID != corrected.ProducerAgentID {
		differ("producer_agent_id", quoteOrNone(orig.ProducerAgentID), quoteOrNone(corrected.ProducerAgentID))
	}
	if orig.WaveID != corrected.WaveID {
		differ("wave_id", quoteOrNone(orig.WaveID), quoteOrNone(corrected.WaveID))
	}
	return out
}

// checkpointIdentity stands in for the original capsule when its bytes
// are gone (forgotten past the retention): what the checkpoint recorded of
// its identity. The producer agent is not recorded there, so the
// correction's is taken as is; the rest is held as with the bytes.
func checkpointIdentity(cp *capsule.Checkpoint, corrected *capsule.Capsule) *capsule.Capsule {
	c := &capsule.Capsule{CapsuleID: cp.CapsuleID, WaveID: cp.WaveID, ProducerAgentID: corrected.ProducerAgentID,
		ParentCapsuleID: cp.Parent}
	if m := cp.Chain; m != nil {
		// Only the membership is recorded: a round's number, findings and
		// prior artifact are taken from the correction.
		c.Chain = &capsule.ChainRound{ID: m.ID, Step: m.Step, Run: m.Run, Gate: m.Gate}
		if r := corrected.Chain; r != nil {
			c.Chain.Round, c.Chain.Findings, c.Chain.PriorArtifact = r.Round, r.Findings, r.PriorArtifact
		}
	}
	return c
}

// chainJSON is a chain object's canonical form for comparison ("" for none).
func chainJSON(c *capsule.ChainRound) []byte {
	if c == nil {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return []byte(fmt.Sprint(*c)) // a struct of strings, ints and findings always marshals
	}
	return b
}

func quoteOrNone(s string) string {
	if s == "" {
		return "absent"
	}
	return fmt.Sprintf("%q", s)
}

func orNone(b []byte) string {
	if len(b) == 0 {
		return "absent"
	}
	return string(b)
}
