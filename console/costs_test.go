package console

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/store"
)

// TestCostsAndTraceLink: /ui/api/costs answers saga.admin.cost's report
// (bad groupings and times are 400); a capsule's page carries the link to
// its trace when --trace-url is set, built from the root span's trace id.
func TestCostsAndTraceLink(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{TraceURL: "http://jaeger:16686/trace/{trace_id}"})
	id := f.publish(t, capsuletest.New().Stub(map[string]any{"usage": map[string]any{"tokens": 1200, "dollars": 0.06}}))
	f.wait(t, id, capsule.Completed)

	var v CostsView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/costs?by=kind&since=7d", &v))
	require.True(t, v.Available, v.Message)
	require.Len(t, v.Report.Groups, 1)
	require.Equal(t, "stub", v.Report.Groups[0].Key)
	require.GreaterOrEqual(t, v.Report.Groups[0].Tokens, int64(1200))
	require.NotEmpty(t, v.Report.Days)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/costs", &v))
	require.Equal(t, "wave", v.Report.By)
	require.Equal(t, http.StatusBadRequest, f.get(t, "/ui/api/costs?by=capsule", nil))
	require.Equal(t, http.StatusBadRequest, f.get(t, "/ui/api/costs?since=yesterday", nil))

	var cv CapsuleView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules/"+id, &cv))
	sc, err := tracing.ParseTraceparent(cv.Checkpoint.TraceParent)
	require.NoError(t, err)
	require.Equal(t, "http://jaeger:16686/trace/"+sc.TraceID().String(), cv.TraceURL)
}

func TestTraceURLTemplate(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "http://jaeger:16686/trace/{trace_id}", "https://grafana.example/explore?traceId={trace_id}&x=1"} {
		require.NoError(t, ValidateTraceURL(ok), ok)
	}
	for _, bad := range []string{"http://jaeger:16686/trace/", "javascript:alert(1)//{trace_id}", "/trace/{trace_id}", "ftp://x/{trace_id}"} {
		require.Error(t, ValidateTraceURL(bad), bad)
		_, err := New(&store.Store{}, nil, Config{TraceURL: bad})
		require.Error(t, err, bad)
		require.True(t, strings.Contains(err.Error(), "{trace_id}"), err.Error())
	}
}
