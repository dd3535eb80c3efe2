package sagatest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// Completion is an execute completion with body's members and the
// completion token the "accepting" executor was last given.
func (b *Bundle) Completion(t *testing.T, body string) []byte {
	t.Helper()
	var tok *string
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		tok = b.AcceptedToken.Load()
		return tok != nil
	}, "the accepting executor was called")
	return WithToken(t, body, *tok)
}

// WithToken returns body, a JSON object, with completion_token set to token.
func WithToken(t testing.TB, body, token string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	m["completion_token"] = token
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// WaitCompletionsDrained polls until the completion ingestor has nothing
// pending or unacknowledged.
func (b *Bundle) WaitCompletionsDrained(t *testing.T) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		cons, err := b.JS.Consumer(context.Background(), store.CompletionsStream, store.CompletionsConsumer)
		if err != nil {
			return false
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, "completions drained")
}

// Terminated reads sagad_messages_terminated_total{cause} from reg.
func Terminated(t testing.TB, reg *prometheus.Registry, cause string) float64 {
	t.Helper()
	return Counter(t, reg, "sagad_messages_terminated_total", "cause", cause)
}
