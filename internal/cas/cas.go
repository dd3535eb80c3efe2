// Package cas recognises a lost compare-and-set on JetStream, which budget,
// locks and the pipeline's checkpoints all rely on.
package cas

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Conflict reports whether err is a lost compare-and-set: the key changed
// since it was read (a KV Update, or a publish with an expected last subject
// sequence) or appeared meanwhile (a KV Create). Non-replicated streams
// report both as code 10071, replicated ones as 10164.
func Conflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
