package cas

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestConflict(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("timeout"), false},
		{jetstream.ErrKeyExists, true},
		{fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch), true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, true},
		{fmt.Errorf("write: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}), true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
	} {
		require.Equal(t, tt.want, Conflict(tt.err), "%v", tt.err)
	}
}
