// Package microreply answers a NATS micro request from a goroutine other
// than the handler's.
//
// micro reads what the request's last answer did (to count errors in the
// endpoint's stats) as soon as the handler returns, so answering through
// the request's own Respond or Error after that races with it. A handler
// that hands a request to a goroutine of its own (a request that waits, a
// refusal that lets another sagad answer first) answers through Detach's
// copy, which publishes on the request's reply subject with its own
// connection and touches nothing micro reads. What such answers do not do
// is count in the endpoint's stats ($SRV.STATS): a price the waiting verbs
// pay for not holding up the requests behind them.
package microreply

import (
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ErrNoReply is returned when the request named no reply subject.
var ErrNoReply = errors.New("microreply: the request has no reply subject")

// Detach returns req answering through nc: safe to answer from any
// goroutine once the handler that got req has returned.
func Detach(nc *nats.Conn, req micro.Request) micro.Request {
	return &detached{Request: req, nc: nc}
}

type detached struct {
	micro.Request
	nc *nats.Conn
}

func (d *detached) publish(m *nats.Msg, opts []micro.RespondOpt) error {
	m.Subject = d.Reply()
	if m.Subject == "" {
		return ErrNoReply
	}
	for _, opt := range opts {
		opt(m)
	}
	return d.nc.PublishMsg(m)
}

// Respond is micro.Request's Respond.
func (d *detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	return d.publish(&nats.Msg{Data: data}, opts)
}

// RespondJSON is micro.Request's RespondJSON.
func (d *detached) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return d.Respond(b, opts...)
}

// Error is micro.Request's Error: the same headers, the same checks.
func (d *detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" {
		return errors.New("microreply: no error code")
	}
	if description == "" {
		return errors.New("microreply: no error description")
	}
	m := &nats.Msg{Data: data, Header: nats.Header{
		micro.ErrorHeader:     []string{description},
		micro.ErrorCodeHeader: []string{code},
	}}
	return d.publish(m, opts)
}
