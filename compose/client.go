package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ErrNoSagad: no sagad serves the compose service on this NATS system (or
// none answered in time).
var ErrNoSagad = errors.New("no sagad answered on " + Subject)

// RequestError is an error answer of the service.
type RequestError struct {
	Code    string
	Message string
	// Findings are a refused document's problems.
	Findings []Finding
}

func (e *RequestError) Error() string { return e.Message }

// Publish sends the chain document doc to sagad on nc (on saga.compose,
// which a producer's account maps to its own) and returns sagad's answer.
func Publish(ctx context.Context, nc *nats.Conn, doc []byte) (Reply, error) {
	msg, err := nc.RequestWithContext(ctx, Subject, doc)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return Reply{}, fmt.Errorf("%w: %v", ErrNoSagad, err)
	}
	if err != nil {
		return Reply{}, fmt.Errorf("%s: %w", Subject, err)
	}
	return DecodeReply(msg)
}

// DecodeReply decodes the service's answer: a [Reply], or a
// [*RequestError] for an error answer.
func DecodeReply(msg *nats.Msg) (Reply, error) {
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		var e ErrorReply
		if json.Unmarshal(msg.Data, &e) != nil || e.Code == "" {
			e = ErrorReply{Code: CodeInternal, Message: msg.Header.Get(micro.ErrorHeader)}
		}
		return Reply{}, &RequestError{Code: e.Code, Message: e.Message, Findings: e.Findings}
	}
	var r Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return Reply{}, fmt.Errorf("%s: reply: %w", Subject, err)
	}
	if r.CompositionID == "" {
		r.CompositionID = r.ChainID
	}
	if r.CompositionID == "" || len(r.Steps) == 0 || len(r.Steps) > MaxSteps {
		return Reply{}, fmt.Errorf("%s: reply: malformed", Subject)
	}
	for i, s := range r.Steps {
		if s.Step != i || s.CapsuleID == "" {
			return Reply{}, fmt.Errorf("%s: reply: malformed step %d", Subject, i)
		}
	}
	return r, nil
}
