package executors

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Defaults of the NATS adapters.
const (
	DefaultNATSTimeout       = time.Minute
	DefaultCompletionTimeout = time.Hour
)

// RetryPolicy bounds how often, and how patiently, a transient failure (a
// request timeout, no responders) is retried.
type RetryPolicy struct {
	// Attempts is the total number of attempts, the first included; 1
	// disables retries. Defaults to 4.
	Attempts int
	// Initial is the wait after the first failed attempt; each further wait
	// doubles. Defaults to 500ms.
	Initial time.Duration
	// Max caps every wait. Defaults to 30s.
	Max time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = 4
	}
	if p.Initial <= 0 {
		p.Initial = 500 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	return p
}

// Backoff is the wait after failed attempt n (1-based): Initial·2ⁿ⁻¹ capped
// at Max, less up to 10 % of jitter so that callers retrying together spread
// out. It never exceeds Max.
func (p RetryPolicy) Backoff(n int) time.Duration {
	p = p.withDefaults()
	d := p.Initial
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	return d - time.Duration(rand.Int64N(int64(d)/10+1))
}

// NATSExecutor calls an executor served on a NATS subject (typically a
// nats.go/micro endpoint) with request/reply; see the package's wire
// contract. Timeouts and "no responders" are retried under Retry, then the
// call fails with a [*FailedError]; an "accepted" reply returns an
// [*AcceptedError].
type NATSExecutor struct {
	Conn *nats.Conn
	// Subject the executor serves.
	Subject string
	// Name identifies it in failure details. Defaults to Subject.
	Name string
	// Timeout bounds each attempt. Defaults to [DefaultNATSTimeout].
	Timeout time.Duration
	// Retry is the policy for transient failures. Defaults to the
	// [RetryPolicy] defaults.
	Retry RetryPolicy
	// CompletionTimeout is how long an accepted call's result may take; it
	// is reported in the [*AcceptedError]. Defaults to [DefaultCompletionTimeout].
	CompletionTimeout time.Duration
}

// Execute sends the request, retrying transient failures, and maps the reply.
func (e NATSExecutor) Execute(ctx context.Context, req Request) (Result, error) {
	who := fmt.Sprintf("nats executor %q", cmp.Or(e.Name, e.Subject))
	call, err := NewExecuteCall(req)
	if err != nil {
		return Result{}, err
	}
	meta := executeMeta(req)
	// Artifact contents are inlined only while the request fits the
	// server's max payload; what is dropped is fetched by reference.
	limit := 0
	if e.Conn != nil {
		// Headers and the subject travel beside the body.
		limit = int(e.Conn.MaxPayload()) - 4096
	}
	body, err := call.Shrink(limit)
	if err != nil {
		return Result{}, &FailedError{Detail: fmt.Sprintf("%s: %v", who, err)}
	}
	data, err := natsCall(ctx, e.Conn, e.Subject, json.RawMessage(body), meta, e.Timeout, e.Retry, who)
	if err != nil {
		return Result{}, err
	}
	reply, err := DecodeExecutorReply(data)
	if err != nil {
		return Result{}, &FailedError{Detail: fmt.Sprintf("%s: %v", who, err)}
	}
	res, err := reply.Result()
	return res, finish(err, who, meta, e.CompletionTimeout)
}

// NATSReviewer calls a reviewer served on a NATS subject. Its fields are
// [NATSExecutor]'s and mean the same.
type NATSReviewer NATSExecutor

// Review sends the request, retrying transient failures, and maps the reply.
func (r NATSReviewer) Review(ctx context.Context, req ReviewRequest) (ReviewResult, error) {
	who := fmt.Sprintf("nats reviewer %q", cmp.Or(r.Name, r.Subject))
	call, err := NewReviewCall(req)
	if err != nil {
		return ReviewResult{}, err
	}
	meta := reviewMeta(req)
	var body any = call
	if r.Conn != nil {
		b, err := json.Marshal(call)
		if err != nil {
			return ReviewResult{}, err
		}
		if len(b) > int(r.Conn.MaxPayload())-4096 && call.CallToken != "" {
			// Too large for one message: the reviewer fetches the
			// artifact by ref on saga.artifacts.get with call_token.
			call.Artifact.Content = nil
		}
		body = call
	}
	data, err := natsCall(ctx, r.Conn, r.Subject, body, meta, r.Timeout, r.Retry, who)
	if err != nil {
		return ReviewResult{}, err
	}
	reply, err := DecodeReviewerReply(data)
	if err != nil {
		return ReviewResult{}, &FailedError{Detail: fmt.Sprintf("%s: %v", who, err)}
	}
	res, err := reply.Result()
	return res, finish(err, who, meta, r.CompletionTimeout)
}

// finish names the worker in a failure and fills in where an accepted
// call's result will arrive.
func finish(err error, who string, meta callMeta, completionTimeout time.Duration) error {
	var failed *FailedError
	var accepted *AcceptedError
	switch {
	case errors.As(err, &failed):
		failed.Detail = who + ": " + failed.Detail
	case errors.As(err, &accepted):
		accepted.Subject = CompletionSubject(meta.capsuleID, meta.cycle)
		accepted.Timeout = cmp.Or(completionTimeout, DefaultCompletionTimeout)
	}
	return err
}

// natsCall sends body to subject and returns the reply's data. A
// micro-service error reply becomes a [*FailedError]; so do transient
// failures once policy's attempts are spent. Cancellation of ctx is returned
// as is (wrapped), so the pipeline retries the phase later.
func natsCall(ctx context.Context, nc *nats.Conn, subject string, body any, meta callMeta, timeout time.Duration, policy RetryPolicy, who string) ([]byte, error) {
	if nc == nil {
		return nil, fmt.Errorf("%s: no NATS connection", who)
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", who, err)
	}
	timeout = cmp.Or(timeout, DefaultNATSTimeout)
	policy = policy.withDefaults()
	for attempt := 1; ; attempt++ {
		msg := &nats.Msg{Subject: subject, Data: data, Header: meta.header()}
		actx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := nc.RequestMsgWithContext(actx, msg)
		cancel()
		if err == nil {
			if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" || resp.Header.Get(micro.ErrorHeader) != "" {
				return nil, &FailedError{Detail: fmt.Sprintf("%s: service error %s: %s", who, code, resp.Header.Get(micro.ErrorHeader))}
			}
			return resp.Data, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", who, ctx.Err())
		}
		var transient string
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			transient = "no responders"
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			transient = fmt.Sprintf("no reply within %s", timeout)
		default:
			return nil, fmt.Errorf("%s: request %s: %w", who, subject, err)
		}
		if attempt >= policy.Attempts {
			return nil, &FailedError{Detail: fmt.Sprintf("%s: %s after %d attempts", who, transient, attempt)}
		}
		t := time.NewTimer(policy.Backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%s: %w", who, ctx.Err())
		case <-t.C:
		}
	}
}
