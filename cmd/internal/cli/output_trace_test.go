package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/client"
)

// TestPrintStatusOTelTraceID: status names the OpenTelemetry trace id when
// it is not the capsule's trace_id, and only then.
func TestPrintStatusOTelTraceID(t *testing.T) {
	t.Parallel()
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tc := range []struct {
		name, traceID, traceParent string
		want                       bool
	}{
		{"same id", "0af7651916cd43dd8448eb211c80319c", tp, false},
		{"producer's own id", "ticket-4711", tp, true},
		{"received before tracing", "ticket-4711", "", false},
		{"malformed trace_parent", "ticket-4711", "00-zz", false},
	} {
		var b bytes.Buffer
		require.NoError(t, printStatus(&b, client.Status{CapsuleID: "c", TraceID: tc.traceID, TraceParent: tc.traceParent}))
		require.Equal(t, tc.want, bytes.Contains(b.Bytes(), []byte("otel_trace_id:")), tc.name)
		if tc.want {
			require.Contains(t, b.String(), "0af7651916cd43dd8448eb211c80319c")
		}
	}
}
