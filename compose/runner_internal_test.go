package compose

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/store"
)

// TestStepEndDelivery: a step end's message is acked once recorded,
// terminated at once when its run's record is corrupt, and otherwise naked
// with a growing delay until MaxStepEndDeliveries, then terminated: never
// delivered for ever.
func TestStepEndDelivery(t *testing.T) {
	t.Parallel()
	transient := errors.New("chain x: nats: timeout")
	bad := fmt.Errorf("wrapped: %w", corrupt.New(store.CompositionsBucket, "k", 3, errors.New("chain record: malformed")))
	for _, tt := range []struct {
		name      string
		err       error
		delivered uint64
		ack       bool
		term      string
		delay     time.Duration
	}{
		{name: "recorded", delivered: 1, ack: true},
		{name: "recorded on a redelivery", delivered: 39, ack: true},
		{name: "corrupt record, first delivery", err: bad, delivered: 1, term: metrics.TermStateCorrupt},
		{name: "corrupt record, later delivery", err: bad, delivered: 7, term: metrics.TermStateCorrupt},
		{name: "transient, first delivery", err: transient, delivered: 1, delay: time.Second},
		{name: "transient, second", err: transient, delivered: 2, delay: 2 * time.Second},
		{name: "transient, fifth", err: transient, delivered: 5, delay: 16 * time.Second},
		{name: "transient, sixth", err: transient, delivered: 6, delay: 30 * time.Second},
		{name: "transient, last before the bound", err: transient, delivered: MaxStepEndDeliveries - 1, delay: 30 * time.Second},
		{name: "transient, at the bound", err: transient, delivered: MaxStepEndDeliveries, term: metrics.TermCompositionUnrecorded},
		{name: "transient, past the bound", err: transient, delivered: MaxStepEndDeliveries + 5, term: metrics.TermCompositionUnrecorded},
		{name: "no metadata (counted as a first delivery)", err: transient, delivered: 0, delay: time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := stepEndDelivery(tt.err, tt.delivered)
			cause, term := d.Terminated()
			delay, nak := d.Retried()
			switch {
			case tt.ack:
				require.False(t, term)
				require.False(t, nak)
				require.NoError(t, d.Err)
			case tt.term != "":
				require.True(t, term)
				require.Equal(t, tt.term, cause)
				require.ErrorIs(t, d.Err, tt.err)
			default:
				require.True(t, nak)
				require.Equal(t, tt.delay, delay)
				require.ErrorIs(t, d.Err, tt.err)
			}
		})
	}
}
