package capsule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// AgentQuery is a question an agent asked a person during a call (a query
// chunk of the Agent Protocol for NATS), kept in the checkpoint until it is
// answered or its call ends. Everything in it but Phase, Cycle and At came
// from the agent: [AgentQuery.Check] must pass before it is recorded.
type AgentQuery struct {
	// ID is the query's id as the agent gave it.
	ID string `json:"id"`
	// ReplySubject is where sagad publishes the answer.
	ReplySubject string `json:"reply_subject"`
	// Prompt is the question, cut to [MaxQueryPrompt] bytes.
	Prompt string `json:"prompt"`
	// Agent names who asks ("<agent>.<owner>.<session>").
	Agent string `json:"agent"`
	// Phase and Cycle are the call's step: EXECUTION or REVIEW.
	Phase Phase `json:"phase"`
	Cycle int   `json:"cycle"`
	// At is when the question arrived.
	At time.Time `json:"at"`
}

// Limits of an agent's question as a checkpoint keeps it.
const (
	// MaxAgentQueries is how many questions of one call may be open at
	// once; a further one is refused (the agent gets no answer to it).
	MaxAgentQueries = 8
	// MaxQueryPrompt bounds a question's text; a longer one is cut.
	MaxQueryPrompt = 8 << 10
	// MaxQueryID bounds a query's id.
	MaxQueryID = 128
	// MaxReplySubject bounds a query's reply subject.
	MaxReplySubject = 256
	// maxQueryAgent bounds the asker's name.
	maxQueryAgent = 256
)

// ErrBadAgentQuery is wrapped by every refusal of [AgentQuery.Check].
var ErrBadAgentQuery = errors.New("bad agent query")

// reservedReplyPrefixes are subjects an agent's reply subject may not name:
// sagad publishes the answer from its own connection, so an agent naming
// sagad's subjects, the server's, or another agent's would make sagad
// publish a person's words there.
var reservedReplyPrefixes = []string{"saga.", "$", "agents.", "_SAGA"}

// AgentAnswerSpace is the one part of saga.> a reply subject may name: on
// the embedded server an agent's _INBOX.> is imported into sagad's account
// as saga.answer.<role>.>, and the agent adapter (sagad's own code, not the
// agent) maps the agent's _INBOX reply subject there, so an answer published
// on it reaches that agent's account's inbox and nothing else.
const AgentAnswerSpace = "saga.answer."

// Check refuses a question sagad must not record or answer: an empty or
// oversized id, a reply subject that is no literal NATS subject or names
// one of sagad's, the server's or the agents' subjects, or text that is not
// UTF-8. It cuts an overlong prompt to [MaxQueryPrompt] (at a rune
// boundary). Errors wrap [ErrBadAgentQuery].
func (q *AgentQuery) Check() error {
	switch {
	case q.ID == "" || len(q.ID) > MaxQueryID || !printable(q.ID):
		return fmt.Errorf("%w: id must be 1 to %d printable bytes", ErrBadAgentQuery, MaxQueryID)
	case len(q.Agent) > maxQueryAgent || !printable(q.Agent):
		return fmt.Errorf("%w: agent must be at most %d printable bytes", ErrBadAgentQuery, maxQueryAgent)
	case !utf8.ValidString(q.Prompt):
		return fmt.Errorf("%w: prompt is not UTF-8", ErrBadAgentQuery)
	}
	if err := CheckReplySubject(q.ReplySubject); err != nil {
		return err
	}
	if len(q.Prompt) > MaxQueryPrompt {
		cut := MaxQueryPrompt
		for cut > 0 && !utf8.RuneStart(q.Prompt[cut]) {
			cut--
		}
		q.Prompt = q.Prompt[:cut]
	}
	return nil
}

// CheckReplySubject refuses a reply subject sagad must not publish to: not
// a literal subject (wildcards, empty tokens, spaces or control bytes),
// longer than [MaxReplySubject], or under a reserved prefix (sagad's
// saga.*, the server's $…, the agents' own agents.*). Errors wrap
// [ErrBadAgentQuery].
func CheckReplySubject(s string) error {
	if s == "" || len(s) > MaxReplySubject {
		return fmt.Errorf("%w: reply_subject must be 1 to %d bytes", ErrBadAgentQuery, MaxReplySubject)
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return fmt.Errorf("%w: reply_subject %q is not a literal subject", ErrBadAgentQuery, s)
		}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f || c == '*' || c == '>' {
			return fmt.Errorf("%w: reply_subject %q is not a literal subject", ErrBadAgentQuery, s)
		}
	}
	if strings.HasPrefix(s, AgentAnswerSpace) && strings.Count(s[len(AgentAnswerSpace):], ".") >= 1 {
		return nil // saga.answer.<role>.<inbox>: the adapter's mapping
	}
	for _, p := range reservedReplyPrefixes {
		if strings.HasPrefix(s, p) {
			return fmt.Errorf("%w: reply_subject %q names a subject reserved to sagad, the server or the agents (%s…)", ErrBadAgentQuery, s, p)
		}
	}
	return nil
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// OpenQuery returns the open question with id, or the oldest when id is
// empty.
func (s *CheckpointState) OpenQuery(id string) (AgentQuery, bool) {
	for _, q := range s.AgentQueries {
		if id == "" || q.ID == id {
			return q, true
		}
	}
	return AgentQuery{}, false
}
