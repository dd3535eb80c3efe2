package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/artifactsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
)

// recorder is an executor that keeps every request and, while each call
// runs, fetches the call's prior artifact on saga.artifacts.get: with the
// call's token (kept in fetched) and with a wrong one (kept in refused).
type recorder struct {
	nc      *nats.Conn
	content func(cycle int) string
	// escalateFirst fails the first call with exit 11 (a person is needed).
	escalateFirst bool

	mu      sync.Mutex
	reqs    []executors.Request
	fetched [][]byte
	refused []string
}

func (r *recorder) Execute(_ context.Context, req executors.Request) (executors.Result, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	first, nc := len(r.reqs) == 1, r.nc
	r.mu.Unlock()
	if req.PriorArtifactRef != "" {
		got, refusal := fetchAll(nc, req.PriorArtifactRef, req.CompletionToken)
		_, wrong := fetchAll(nc, req.PriorArtifactRef, "not-"+req.CompletionToken)
		r.mu.Lock()
		r.fetched = append(r.fetched, got)
		r.refused = append(r.refused, refusal+"|"+wrong)
		r.mu.Unlock()
	}
	if first && r.escalateFirst {
		return executors.Result{}, &executors.FailedError{Detail: "which licence?", ExitCode: executors.ExitNeedsEscalation}
	}
	return executors.Result{Content: json.RawMessage(r.content(req.Cycle)), MediaType: "application/json", Usage: capsule.Usage{Tokens: 1}}, nil
}

func (r *recorder) setConn(nc *nats.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nc = nc
}

func (r *recorder) requests() []executors.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]executors.Request(nil), r.reqs...)
}

// fetchAll reads ref in pages; on a refusal it returns the error code.
func fetchAll(nc *nats.Conn, ref, token string) ([]byte, string) {
	var out []byte
	for {
		body, _ := json.Marshal(artifactsvc.Request{Ref: ref, Token: token, Offset: int64(len(out))})
		msg, err := nc.Request(artifactsvc.Subject, body, 5*time.Second)
		if err != nil {
			return nil, err.Error()
		}
		if msg.Header.Get(micro.ErrorCodeHeader) != "" {
			var e artifactsvc.ErrorReply
			_ = json.Unmarshal(msg.Data, &e)
			return nil, e.Code
		}
		var p artifactsvc.Reply
		if err := json.Unmarshal(msg.Data, &p); err != nil {
			return nil, err.Error()
		}
		out = append(out, p.Data...)
		if p.EOF {
			return out, ""
		}
	}
}

// picky asks for changes with one finding, every time.
type picky struct{}

func (picky) Review(context.Context, executors.ReviewRequest) (executors.ReviewResult, error) {
	return executors.ReviewResult{Verdict: capsule.ChangesRequested, Findings: []capsule.Finding{{Field: "artifact", Message: "cite the licence"}}}, nil
}

// TestReviseCarriesReviewerFindingsAnswerAndPriorArtifact: an operator's
// revise over the reviewer's CHANGES_REQUESTED sends the next cycle the
// reviewer's findings, then the rationale marked source operator, the
// rationale as operator_answer, and the prior artifact (2 MiB: the worker
// reads it through saga.artifacts.get with its call's token; a wrong token
// is refused). Before, the reviewer's findings were dropped and the prior
// artifact was a bare ref nobody could read.
func TestReviseCarriesReviewerFindingsAnswerAndPriorArtifact(t *testing.T) {
	t.Parallel()
	big := `"` + strings.Repeat("y", 2<<20) + `"`
	rec := &recorder{content: func(cycle int) string {
		if cycle == 1 {
			return big
		}
		return `{"cycle":2}`
	}}
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("recording", rec)
		c.Executors.RegisterReviewer("picky", picky{})
	})
	rec.setConn(f.NC)
	a := f.Admin(t)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "recording").Set("review.reviewer_agent_id", "picky").Set("review.operator_gate", "all"))
	f.Publish(t, doc.Sealed(t))
	f.WaitState(t, doc.ID(), capsule.WaitingForOperator)
	_, err := a.Decide(ctx, doc.ID(), admin.DecisionRevise, "use the MIT text", "carol")
	require.NoError(t, err)
	f.WaitState(t, doc.ID(), capsule.WaitingForOperator)

	reqs := rec.requests()
	require.Len(t, reqs, 2)
	require.Empty(t, reqs[0].Findings)
	require.Nil(t, reqs[0].PriorArtifact)
	require.Nil(t, reqs[0].OperatorAnswer)
	r := reqs[1]
	require.Equal(t, []capsule.Finding{
		{Field: "artifact", Message: "cite the licence"},
		{Message: "operator revision: use the MIT text", Source: capsule.FindingSourceOperator},
	}, r.Findings)
	require.NotNil(t, r.OperatorAnswer)
	require.Equal(t, "use the MIT text", r.OperatorAnswer.Text)
	require.Equal(t, "carol", r.OperatorAnswer.By)
	require.NotNil(t, r.PriorArtifact)
	require.Equal(t, r.PriorArtifactRef, r.PriorArtifact.Ref)
	require.Equal(t, big, string(r.PriorArtifact.Content))

	// On the wire the 2 MiB content goes by reference, ref, size and
	// sha256 inline.
	call, err := executors.NewExecuteCall(r)
	require.NoError(t, err)
	require.Nil(t, call.PriorArtifact.Content)
	require.Equal(t, int64(len(big)), call.PriorArtifact.Size)
	require.Equal(t, r.PriorArtifact.SHA256, call.PriorArtifact.SHA256)
	require.Equal(t, "use the MIT text", call.OperatorAnswer.Text)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.fetched, 1)
	require.Equal(t, big, string(rec.fetched[0]), "the worker reads the prior artifact with its call's token")
	require.Equal(t, "|"+artifactsvc.CodeForbidden, rec.refused[0], "and not with another")
}

// TestResumeAnswerReachesExecutor: an executor that escalates (exit 11)
// pauses the capsule; `resume --answer` records the answer with who gave it,
// and the next call carries it as operator_answer. Before, the answer had
// nowhere to go.
func TestResumeAnswerReachesExecutor(t *testing.T) {
	t.Parallel()
	rec := &recorder{escalateFirst: true, content: func(int) string { return `{"ok":true}` }}
	f := sagatest.Run(t, func(c *pipeline.Config) { c.Executors.RegisterExecutor("recording", rec) })
	rec.setConn(f.NC)
	a := f.Admin(t)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "recording"))
	f.Publish(t, doc.Sealed(t))
	f.WaitState(t, doc.ID(), capsule.Paused)
	_, err := a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "dana", Reason: "answered", Answer: "licence is MIT"})
	require.NoError(t, err)
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)

	reqs := rec.requests()
	require.Len(t, reqs, 2)
	require.Nil(t, reqs[0].OperatorAnswer)
	ans := reqs[1].OperatorAnswer
	require.NotNil(t, ans)
	require.Equal(t, "licence is MIT", ans.Text)
	require.Equal(t, "dana", ans.By)
	require.False(t, ans.At.IsZero())
	cp := f.WaitCheckpoint(t, doc.ID(), func(cp *capsule.Checkpoint) bool { return cp.State.OperatorAnswer != nil })
	require.Equal(t, *ans, *cp.State.OperatorAnswer)
}
