package adminsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/store"
)

// ErrNoSagad matches the error of a request no sagad answered: none serves
// the admin service on this NATS system (then nothing was changed), or none
// answered before the deadline.
var ErrNoSagad = errors.New("no sagad answered")

// ErrBadRequest matches an [*Error] with code bad_request.
var ErrBadRequest = errors.New("bad admin request")

// ErrInternal matches an [*Error] with code internal.
var ErrInternal = errors.New("admin request failed in sagad")

// NoSagadError is a request no sagad answered.
type NoSagadError struct {
	// Subject the request was sent on.
	Subject string
	// Waited is how long the client waited; 0 when NATS reported at once
	// that nobody listens (no responders: nothing was changed).
	Waited time.Duration
	// Err is what NATS returned.
	Err error
}

func (e *NoSagadError) Error() string {
	if e.Waited == 0 {
		return fmt.Sprintf("no sagad answered on %s: is sagad running?", e.Subject)
	}
	return fmt.Sprintf("no sagad answered on %s within %s: is sagad running? (if one is, it may still carry the action out)",
		e.Subject, e.Waited.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrNoSagad) true.
func (e *NoSagadError) Is(target error) bool { return target == ErrNoSagad }

// Unwrap returns the NATS error.
func (e *NoSagadError) Unwrap() error { return e.Err }

// Error is an error answer of the service. errors.Is maps its code back:
// refused matches admin.ErrRefused, not_found store.ErrNotFound,
// bad_request [ErrBadRequest], internal [ErrInternal].
type Error struct {
	// Subject the request was sent on.
	Subject string
	// Code is one of the Code constants (or what a newer sagad sent).
	Code string
	// Message is sagad's description, e.g. "cannot pause X: it is completed".
	Message string
}

func (e *Error) Error() string { return e.Message }

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeRefused:
		return target == admin.ErrRefused
	case CodeNotFound:
		return target == store.ErrNotFound
	case CodeBadRequest:
		return target == ErrBadRequest
	case CodeInternal:
		return target == ErrInternal
	}
	return false
}

// ClientConfig tunes a [Client].
type ClientConfig struct {
	// Timeout bounds a request whose context has no deadline. Defaults to
	// 35s: longer than the service's own default handling timeout, so a
	// slow action is reported by sagad rather than abandoned.
	Timeout time.Duration
}

// Client calls the admin service. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	timeout time.Duration
}

// NewClient returns a client sending requests on nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout + 5*time.Second
	}
	return &Client{nc: nc, timeout: cfg.Timeout}
}

// Pause parks a capsule with operator_manual.
func (c *Client) Pause(ctx context.Context, r PauseRequest) (client.Status, error) {
	var s client.Status
	return s, c.call(ctx, VerbPause, r, &s)
}

// Resume resumes a paused capsule where it stopped.
func (c *Client) Resume(ctx context.Context, r ResumeRequest) (client.Status, error) {
	var s client.Status
	return s, c.call(ctx, VerbResume, r, &s)
}

// Cancel ends a capsule cancelled.
func (c *Client) Cancel(ctx context.Context, r CancelRequest) (client.Status, error) {
	var s client.Status
	return s, c.call(ctx, VerbCancel, r, &s)
}

// Decide settles the operator gate.
func (c *Client) Decide(ctx context.Context, r DecideRequest) (client.Status, error) {
	var s client.Status
	return s, c.call(ctx, VerbDecide, r, &s)
}

// Replay runs a halted or cancelled capsule again as a new run.
func (c *Client) Replay(ctx context.Context, r ReplayRequest) (ReplayReply, error) {
	var out ReplayReply
	return out, c.call(ctx, VerbReplay, r, &out)
}

// PreviewReplay answers what Replay with the same request would do, and
// does none of it.
func (c *Client) PreviewReplay(ctx context.Context, r ReplayRequest) (ReplayPreviewReply, error) {
	var out ReplayPreviewReply
	return out, c.call(ctx, VerbReplayPreview, r, &out)
}

// PausePhase stops every sagad consuming a phase and returns the phases.
func (c *Client) PausePhase(ctx context.Context, r PhaseRequest) ([]admin.PhaseState, error) {
	var p PhasesReply
	return p.Phases, c.call(ctx, VerbPhasePause, r, &p)
}

// ResumePhase lets every sagad consume a phase again and returns the phases.
func (c *Client) ResumePhase(ctx context.Context, r PhaseRequest) ([]admin.PhaseState, error) {
	var p PhasesReply
	return p.Phases, c.call(ctx, VerbPhaseResume, r, &p)
}

// Phases reports every phase consumer.
func (c *Client) Phases(ctx context.Context) ([]admin.PhaseState, error) {
	var p PhasesReply
	return p.Phases, c.call(ctx, VerbPhaseList, struct{}{}, &p)
}

// Pending lists what waits for a human, oldest first.
func (c *Client) Pending(ctx context.Context) ([]admin.PendingItem, error) {
	p, err := c.PendingAll(ctx)
	return p.Items, err
}

// PendingAll is pending's whole reply: the capsules, and the composition
// runs whose loop waits for a decision.
func (c *Client) PendingAll(ctx context.Context) (PendingReply, error) {
	var p PendingReply
	return p, c.call(ctx, VerbPending, struct{}{}, &p)
}

// Rules reports the constitution the answering sagad enforces: every rule
// with its parameters under that sagad's configuration, and the version.
func (c *Client) Rules(ctx context.Context) (rules.Report, error) {
	var r rules.Report
	return r, c.call(ctx, VerbRules, struct{}{}, &r)
}

// Call sends req on verb's subject and decodes the answer into reply, for a
// verb this client has no method for (the console forwards the verbs a
// newer sagad may serve, such as replay and the wave verbs). Errors are
// those of the methods: a verb no sagad serves is a [NoSagadError] with no
// wait.
func (c *Client) Call(ctx context.Context, verb string, req, reply any) error {
	return c.call(ctx, verb, req, reply)
}

// call sends req on verb's subject and decodes the answer into reply.
func (c *Client) call(ctx context.Context, verb string, req, reply any) error {
	subject := Subject(verb)
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: encode request: %w", subject, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	start := time.Now()
	msg, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body})
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return &NoSagadError{Subject: subject, Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return &NoSagadError{Subject: subject, Waited: time.Since(start), Err: err}
	case err != nil:
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		var e ErrorReply
		if json.Unmarshal(msg.Data, &e) != nil || e.Code == "" {
			// Not one of ours (a newer or foreign service): keep micro's view.
			e = ErrorReply{Code: CodeInternal, Message: msg.Header.Get(micro.ErrorHeader) + " (" + code + ")"}
		}
		return &Error{Subject: subject, Code: e.Code, Message: e.Message}
	}
	if err := json.Unmarshal(msg.Data, reply); err != nil {
		return fmt.Errorf("%s: decode reply: %w", subject, err)
	}
	return nil
}
