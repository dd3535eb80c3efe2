package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/tracing"
)

func TestParseConfigOTelEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		file string
		env  map[string]string
		args []string
		want string
	}{
		{name: "off by default"},
		{name: "file", file: `{"otel_endpoint":"http://file:4318"}`, want: "http://file:4318"},
		{name: "env over file", file: `{"otel_endpoint":"http://file:4318"}`, env: map[string]string{"SAGAD_OTEL_ENDPOINT": "http://env:4318"}, want: "http://env:4318"},
		{name: "flag over env", env: map[string]string{"SAGAD_OTEL_ENDPOINT": "http://env:4318"}, args: []string{"--otel-endpoint", "https://flag:4318"}, want: "https://flag:4318"},
		{name: "flag empty turns the env off", env: map[string]string{"SAGAD_OTEL_ENDPOINT": "http://env:4318"}, args: []string{"--otel-endpoint", ""}, want: ""},
	} {
		args := tc.args
		if tc.file != "" {
			args = append([]string{"--config", writeConfig(t, tc.file)}, args...)
		}
		got, err := parseConfig(args, envOf(tc.env), io.Discard)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got.OTelEndpoint, tc.name)
	}
	for _, bad := range [][]string{{"--otel-endpoint", "localhost:4318"}, {"--otel-endpoint", "grpc://c:4317"}} {
		_, err := parseConfig(bad, envOf(nil), io.Discard)
		require.ErrorContains(t, err, "want an http or https URL", bad[1])
	}
	_, err := parseConfig(nil, envOf(map[string]string{"SAGAD_OTEL_ENDPOINT": "c:4318"}), io.Discard)
	require.ErrorContains(t, err, "want an http or https URL")
}

// otlpSink is an OTLP/HTTP trace receiver keeping what it is sent.
type otlpSink struct {
	mu    sync.Mutex
	reqs  []*coltracepb.ExportTraceServiceRequest
	paths []string
	// resource is the last resource's attributes, filled by spans.
	resource map[string]string
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := new(coltracepb.ExportTraceServiceRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.paths = append(s.paths, r.URL.Path)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// spans lists the received spans as name → hex trace id, and the
// service.name of the resource.
func (s *otlpSink) spans() (map[string]string, []string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := map[string]string{}
	service := ""
	for _, req := range s.reqs {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
				if s.resource == nil {
					s.resource = map[string]string{}
				}
				s.resource[a.Key] = a.GetValue().GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					names[sp.Name] = traceHex(sp.TraceId)
				}
			}
		}
	}
	return names, append([]string(nil), s.paths...), service
}

func traceHex(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0xf])
	}
	return string(out)
}

// TestRunExportsTraces: with --otel-endpoint, sagad sends a capsule's spans
// over OTLP/HTTP (flushed at the latest on shutdown).
func TestRunExportsTraces(t *testing.T) {
	t.Parallel()
	sink := &otlpSink{}
	srv := httptest.NewServer(sink)
	t.Cleanup(srv.Close)
	cfg := testConfig(t, t.TempDir())
	cfg.OTelEndpoint = srv.URL
	d := start(t, cfg)
	nc, client := connect(t, d.url, cfg.DataDir)
	doc := capsuletest.New()
	_, err := client.Publish(context.Background(), doc.Sealed(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.Wait(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	nc.Close()
	require.NoError(t, d.stop(t))

	names, paths, service := sink.spans()
	require.NotEmpty(t, paths)
	for _, p := range paths {
		require.Equal(t, "/v1/traces", p)
	}
	require.Equal(t, "sagad", service)
	sink.mu.Lock()
	res := sink.resource
	sink.mu.Unlock()
	require.NotEmpty(t, res["service.version"], "resource %v", res)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, res["service.instance.id"], "resource %v", res)
	require.Equal(t, tracing.InstanceID(), res["service.instance.id"])
	for _, n := range []string{"capsule", "phase RECEPTION", "phase EXECUTION", "phase HANDOFF", "agent execute stub", "agent review stub-reviewer"} {
		require.Contains(t, names, n)
		require.Equal(t, s.TraceID, names[n], "span %s is in the capsule's trace", n)
	}
}

// TestMetricsExemplars: a scraper asking for OpenMetrics gets the latency
// histograms' exemplars, the capsule's trace id; a plain scrape is the
// text format as before. Tracing is off: the trace id is the capsule's all
// the same.
func TestMetricsExemplars(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HTTPListen = freeAddr(t)
	d := start(t, cfg)
	_, client := connect(t, d.url, cfg.DataDir)
	doc := capsuletest.New()
	_, err := client.Publish(context.Background(), doc.Sealed(t), "")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.Wait(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State)

	scrape := func(accept string) string {
		req, err := http.NewRequest(http.MethodGet, "http://"+cfg.HTTPListen+"/metrics", nil)
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	om := scrape("application/openmetrics-text; version=1.0.0")
	tid := tracing.TraceIDOfTraceparent(s.TraceParent)
	require.NotEmpty(t, tid)
	require.Regexp(t, `sagad_phase_duration_seconds_bucket\{[^}]*\} \d+ # \{trace_id="[0-9a-f]{32}"\}`, om)
	require.Contains(t, om, `# {trace_id="`+tid+`"}`)
	require.Regexp(t, `sagad_agent_call_duration_seconds_bucket\{[^}]*\} \d+ # \{trace_id="`+tid+`"\}`, om)
	require.NotContains(t, scrape(""), "# {trace_id=", "the text format has no exemplars")
}
