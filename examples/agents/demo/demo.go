// Package demo holds the canned logic of the example agents: an author
// (executor) and a critic (reviewer) speaking the Agent Protocol for NATS.
package demo

import (
	"context"
	"strings"

	"github.com/sagad/sagad/internal/agenttest"
)

// The roles whose seeds the agents log in with: sagad writes one per
// configured kind (examples/agents/sagad.json).
const (
	AuthorRole = "executor-author"
	CriticRole = "reviewer-critic"
)

// Author drafts an answer in three chunks, says what the turn cost (the
// Claude Code host's cost status) and, on a revision, addresses the
// findings the prompt lists.
func Author(_ context.Context, req agenttest.Request, s *agenttest.Stream) {
	p := req.Envelope.Prompt
	s.Ack()
	s.Text("# " + line(p, "# ") + "\n\n")
	s.TextObject("A first answer to the task.\n")
	if strings.Contains(p, "add an example") {
		s.Text("\n## Example\n\n    sagactl status ID\n")
	}
	s.Cost(0.01)
}

// Critic asks for an example until the draft has one, then approves.
func Critic(_ context.Context, req agenttest.Request, s *agenttest.Stream) {
	s.Ack()
	s.Usage(int64(len(req.Envelope.Prompt)/4), 40)
	if !strings.Contains(req.Envelope.Prompt, "## Example") {
		s.Text("The draft has no example.\n```json\n{\"verdict\": \"CHANGES_REQUESTED\", \"findings\": [{\"message\": \"add an example\", \"severity\": \"major\"}]}\n```\n")
		return
	}
	s.Text("Good.\n```json\n{\"verdict\": \"APPROVED\", \"findings\": []}\n```\n")
}

// line is the first line of p that starts with prefix, without it.
func line(p, prefix string) string {
	for _, l := range strings.Split(p, "\n") {
		if t, ok := strings.CutPrefix(l, prefix); ok {
			return t
		}
	}
	return "Answer"
}
