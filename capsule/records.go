package capsule

import (
	"encoding/json"
	"errors"
	"time"
)

// ErrArtifactGone is returned (wrapped) when an artifact is not, or no
// longer, stored: artifacts are kept for the retention after they were
// written (pipeline.Config.Retention).
var ErrArtifactGone = errors.New("artifact not stored")

// Artifact is the record of what an executor produced for one cycle
// (artifact.schema.json). Ref is the artifact: URI other capsules use.
type Artifact struct {
	SchemaVersion   string          `json:"schema_version"`
	Ref             string          `json:"ref"`
	CapsuleID       string          `json:"capsule_id"`
	ProducerAgentID string          `json:"producer_agent_id"`
	Cycle           int             `json:"cycle"`
	MediaType       string          `json:"media_type"`
	SHA256          string          `json:"sha256"`
	Size            int64           `json:"size"`
	Usage           Usage           `json:"usage"`
	CreatedAt       time.Time       `json:"created_at"`
	Content         json.RawMessage `json:"content,omitempty"`
}

// Review is a reviewer's answer for one cycle (review.schema.json).
type Review struct {
	SchemaVersion   string    `json:"schema_version"`
	CapsuleID       string    `json:"capsule_id"`
	Cycle           int       `json:"cycle"`
	ReviewerAgentID string    `json:"reviewer_agent_id"`
	Verdict         Verdict   `json:"verdict"`
	Findings        []Finding `json:"findings"`
	Usage           Usage     `json:"usage"`
	At              time.Time `json:"at"`
}

// Continuation records why and where a capsule paused, so resume can continue
// exactly there (continuation.schema.json).
type Continuation struct {
	SchemaVersion string    `json:"schema_version"`
	CapsuleID     string    `json:"capsule_id"`
	Trigger       Trigger   `json:"trigger"`
	Reason        string    `json:"reason,omitempty"`
	Phase         Phase     `json:"phase"`
	PhaseName     string    `json:"phase_name"`
	Cycle         int       `json:"cycle"`
	By            string    `json:"by,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
}
