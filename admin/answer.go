package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/status"
)

// answerTimeout bounds delivering an answer to an agent: the publish and
// the flush that makes sure the server has it.
const answerTimeout = 5 * time.Second

// answerQuery answers the oldest open question of the capsule's agent with
// opts.Answer: the answer and who gave it are recorded in the checkpoint
// (machine.Answer: once no question is open the capsule is in progress
// again, and a later attempt carries the answer), then published to the
// question's reply subject from sagad's own connection, and the
// agent_query_answered event says who answered what. Recording comes first:
// an answer that was not recorded is never sent, and one recorded but not
// delivered (the error says so) still reaches the next attempt.
func (a *Admin) answerQuery(ctx context.Context, cp *capsule.Checkpoint, opts ResumeOptions) (status.Status, error) {
	at := a.now()
	if opts.Tokens != 0 || opts.Dollars != 0 || opts.Deadline != nil || opts.Extend != 0 || opts.Force {
		return status.Of(cp), &StateError{Kind: ErrRefused, Event: "answer", Key: cp.Key, State: cp.State.Status,
			Hint: "its agent waits for an answer, which takes no caps, deadline or force: answer alone, then pause it to change those"}
	}
	q, ok := cp.State.OpenQuery("")
	if !ok {
		return status.Of(cp), &StateError{Kind: ErrRefused, Event: "answer", Key: cp.Key, State: cp.State.Status, Hint: "no question of its agent is open"}
	}
	res, err := a.Apply(ctx, cp.Key, machine.Answer{QueryID: q.ID, Text: opts.Answer, By: opts.By})
	if err != nil {
		return status.Status{}, err
	}
	cp = res.Checkpoint
	if err := a.deliverAnswer(ctx, q.ReplySubject, opts.Answer); err != nil {
		return status.Of(cp), fmt.Errorf("answer of %s recorded (a later attempt carries it) but not delivered to its agent: %w", cp.Key, err)
	}
	detail := q.ID + ": " + opts.Answer
	if opts.Reason != "" {
		detail += " (" + opts.Reason + ")"
	}
	if err := a.adminEvent(ctx, cp, at, capsule.EventAgentQueryAnswered, queryEventID(q), detail, opts.Answer, opts.By, nil); err != nil {
		return status.Of(cp), err
	}
	if cp.State.Status == capsule.InProgress {
		if err := a.st.Continuations.DeleteIfStale(ctx, cp.Key, cp); err != nil {
			return status.Of(cp), err
		}
		a.metrics.Resumed(capsule.TriggerAgentQuery)
	}
	a.metrics.AdminAction(metrics.ActionAnswer)
	return status.Of(cp), nil
}

// deliverAnswer publishes text to an agent's reply subject (checked when
// the question was recorded: capsule.CheckReplySubject) and waits for the
// server to have it. Fire and forget, as the Agent Protocol says: nobody
// acknowledges an answer.
func (a *Admin) deliverAnswer(ctx context.Context, subject, text string) error {
	if err := capsule.CheckReplySubject(subject); err != nil {
		return err
	}
	nc := a.st.JetStream().Conn()
	if err := nc.PublishMsg(&nats.Msg{Subject: subject, Data: []byte(text)}); err != nil {
		return fmt.Errorf("publish to %s: %w", subject, err)
	}
	fctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("flush the answer to %s: %w", subject, err)
	}
	return nil
}

// asksAPerson reports whether cp's agent waits for an answer to a question
// (trigger agent_query), which a resume with an answer gives.
func asksAPerson(cp *capsule.Checkpoint, answer string) bool {
	i, ok := cp.State.ParkedBy()
	return ok && i.CallRuns && strings.TrimSpace(answer) != ""
}

// queryEventID names the answer event of q: its id came from the agent,
// so it is hashed (with when it was asked) rather than put in a
// de-duplication id as it is.
func queryEventID(q capsule.AgentQuery) string {
	h := sha256.Sum256([]byte(q.ID + "\x00" + q.At.UTC().Format(time.RFC3339Nano)))
	return "query-" + hex.EncodeToString(h[:8])
}
