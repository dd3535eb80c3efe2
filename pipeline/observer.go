package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/status"
)

// askTimeout bounds recording an agent's question: the checkpoint write,
// its continuation and its event.
const askTimeout = 15 * time.Second

// callObserver is the [executors.CallObserver] of one EXECUTION or REVIEW
// attempt: a streamed call's progress goes to the pipeline's [status.Calls]
// (what `sagactl status` and the console show live), and its agent's
// questions become agent_query pauses recorded with the attempt's claim.
type callObserver struct {
	p     *Pipeline
	t     *txn
	ph    capsule.Phase
	cycle int
	// asking counts the questions being recorded: the attempt records its
	// decision only after them, so a question's continuation and event
	// never come after the decision that closed it.
	asking sync.WaitGroup
	// asked counts the questions of the attempt, past maxAskedPerAttempt
	// dropped: an agent that floods questions costs no more writes.
	asked atomic.Int32
}

// maxAskedPerAttempt bounds the questions one attempt records or tries to:
// the checkpoint keeps capsule.MaxAgentQueries open at once.
const maxAskedPerAttempt = 4 * capsule.MaxAgentQueries

// Progress implements executors.CallObserver.
func (o *callObserver) Progress(cp executors.CallProgress) {
	o.p.calls.Put(o.t.key, o.t.token, status.Call{
		Phase: int(o.ph), PhaseName: o.ph.String(), Cycle: o.cycle, Agent: cp.Agent, Subject: cp.Subject,
		Chunks: cp.Chunks, Bytes: cp.Bytes, Started: cp.Started, LastChunk: cp.LastChunk, Text: cp.Text, Done: cp.Done,
	})
}

// Query implements executors.CallObserver: the question is recorded on a
// goroutine of its own, the call's reading goes on.
func (o *callObserver) Query(q executors.AgentQuery) {
	if n := o.asked.Add(1); n > maxAskedPerAttempt {
		if n == maxAskedPerAttempt+1 {
			o.p.log.Warn("an agent asks too many questions: the rest are dropped, unanswered", "key", o.t.key,
				"phase", o.ph.String(), "cycle", o.cycle, "agent", q.Agent, "limit", maxAskedPerAttempt)
		}
		return
	}
	o.asking.Add(1)
	go func() {
		defer o.asking.Done()
		o.ask(q)
	}()
}

// ask records q with the attempt's claim and writes what the pause calls
// for. A question the machine refuses (malformed, a reserved reply
// subject, too many open, the claim lost) is logged and gets no answer.
func (o *callObserver) ask(q executors.AgentQuery) {
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	aq := capsule.AgentQuery{ID: q.ID, ReplySubject: q.ReplySubject, Prompt: q.Prompt, Agent: q.Agent, At: q.At}
	res, err := o.t.apply(ctx, machine.Ask{Phase: o.ph, Cycle: o.cycle, Holder: o.t.token, Query: aq}, reapply)
	if err != nil {
		o.p.log.Warn("an agent's question is not recorded: it gets no answer", "key", o.t.key, "phase", o.ph.String(),
			"cycle", o.cycle, "agent", q.Agent, "query_id", q.ID, "error", err)
		return
	}
	if !res.Changed {
		return
	}
	cp := res.Checkpoint
	o.p.log.Info("parked", "capsule_id", cp.CapsuleID, "key", cp.Key, "phase", o.ph.String(), "cycle", o.cycle,
		"trace_id", cp.TraceID, "trigger", capsule.TriggerAgentQuery, "agent", q.Agent, "query_id", q.ID)
	n := len(cp.State.AgentQueries)
	if n == 1 {
		o.p.metrics.Paused(capsule.TriggerAgentQuery)
		// The continuation and the agent_query event of the pause.
		err = o.p.st.EmitParked(ctx, cp)
	} else {
		// A further question of a capsule parked already: its own event.
		last := cp.State.AgentQueries[n-1]
		err = o.p.st.PublishEvent(ctx, capsule.Event{
			ID:   fmt.Sprintf("%s.%d.%d.%s.%d.%s", cp.Key, o.ph, o.cycle, capsule.EventAgentQuery, last.At.UnixNano(), strconv.Itoa(n)),
			Kind: capsule.EventAgentQuery, CapsuleID: cp.CapsuleID, Key: cp.Key, Phase: o.ph, PhaseName: o.ph.String(),
			Cycle: o.cycle, TraceID: cp.TraceID, Detail: string(capsule.TriggerAgentQuery) + ": " + machine.QueryReason(last),
			By: last.Agent, At: last.At,
		})
	}
	if err != nil {
		// The question is recorded (pending and status show it); only its
		// event or continuation is missing.
		o.p.log.Warn("an agent's question is recorded, its event not", "key", cp.Key, "query_id", q.ID, "error", err)
	}
}

// finish waits for the questions being recorded and takes the call off the
// board: the attempt is about to record its decision.
func (o *callObserver) finish() {
	o.asking.Wait()
	o.p.calls.Drop(o.t.key, o.t.token)
}
