package console

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go's ObjectStore.Put (the pipeline's artifacts) can leave this
		// goroutine blocked: an upstream race, not ours (see cmd/internal/cli).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

type tlog struct{ t testing.TB }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// fixture is a pipeline, its admin service and a console over them, served
// by an httptest server.
type fixture struct {
	nc      *nats.Conn
	console *Console
	srv     *httptest.Server
	client  *client.Client
	st      *store.Store
}

func setup(t *testing.T, cfg Config) *fixture { return setupWith(t, cfg, true) }

// setupWith starts the console on a pipeline; withAdmin false leaves
// sagad's admin service out, so that no verb is served.
func setupWith(t *testing.T, cfg Config, withAdmin bool) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: testLogger(t), Workspace: capsuletest.Workspace(t), Workers: 4,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	if withAdmin {
		svc, err := adminsvc.Start(nc, p.Admin(), adminsvc.Config{Logger: testLogger(t), Rules: p.Rules(), Costs: adminsvc.StoreCosts(p.Store()),
			Compositions: adminsvc.StoreCompositions(p.Store(), p.Admin())})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	}
	cfg.Logger = testLogger(t)
	c, err := New(p.Store(), adminsvc.NewClient(nc, adminsvc.ClientConfig{Timeout: 10 * time.Second}), cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	srv := httptest.NewServer(c.Handler())
	// Stop first: it ends the event streams Close would wait for.
	t.Cleanup(func() { c.Stop(); srv.Close() })
	cl, err := client.NewClient(ctx, js)
	require.NoError(t, err)
	return &fixture{nc: nc, console: c, srv: srv, client: cl, st: p.Store()}
}

func (f *fixture) publish(t *testing.T, doc capsuletest.Doc) string {
	t.Helper()
	_, err := f.client.Publish(context.Background(), doc.Sealed(t), "")
	require.NoError(t, err)
	return doc.ID()
}

func (f *fixture) wait(t *testing.T, id string, want capsule.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := f.client.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, want, s.State, "halt: %s", s.HaltReason)
}

// get reads path and decodes its JSON answer into v (when not nil),
// returning the status code.
func (f *fixture) get(t *testing.T, path string, v any) int {
	t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if v != nil && resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(b, v), "%s", b)
	}
	return resp.StatusCode
}

// act posts an action as the console's page does.
func (f *fixture) act(t *testing.T, verb string, body any, hdr map[string]string) (int, string) {
	t.Helper()
	return f.post(t, "/ui/api/actions/"+verb, body, hdr)
}

// post posts body to path as the console's page does; hdr changes the
// headers (an empty value removes one).
func (f *fixture) post(t *testing.T, path string, body any, hdr map[string]string) (int, string) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(string(b)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(csrfHeader, "1")
	req.Header.Set("Origin", f.srv.URL)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// sse reads the console's event stream.
type sse struct {
	resp   *http.Response
	events chan [2]string // event, data
}

func (f *fixture) stream(t *testing.T) *sse {
	t.Helper()
	resp, err := http.Get(f.srv.URL + "/ui/api/stream")
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sse{resp: resp, events: make(chan [2]string, 1024)}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev != "":
				s.events <- [2]string{ev, data}
				ev, data = "", ""
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

// until reads events until a capsule row satisfies ok.
func (s *sse) until(t *testing.T, ok func(Row) bool) Row {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, open := <-s.events:
			require.True(t, open, "event stream ended")
			if e[0] != "capsule" {
				continue
			}
			var r Row
			require.NoError(t, json.Unmarshal([]byte(e[1]), &r))
			if ok(r) {
				return r
			}
		case <-timeout:
			t.Fatal("no such event within 30s")
		}
	}
}

// TestConsoleEndToEnd: a gated capsule shows in the inbox with its verdict,
// the live stream carries its changes, an accept through the console
// completes it, and its page, artifacts, the list and the phases answer.
func TestConsoleEndToEnd(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	gated := f.publish(t, capsuletest.New().Set("review.operator_gate", true).Set("wave_id", "w-1"))
	f.wait(t, gated, capsule.WaitingForOperator)
	select {
	case <-f.console.Index().Ready():
		t.Fatal("the index filled before anyone asked: the watch should wait for the first request")
	default:
	}
	require.Zero(t, f.console.Index().Len())
	live := f.stream(t)

	var in InboxView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
	require.Len(t, in.Decide, 1)
	require.Equal(t, gated, in.Decide[0].CapsuleID)
	require.Equal(t, capsule.Approved, in.Decide[0].Verdict)
	require.Equal(t, capsule.TriggerOperatorGate, in.Decide[0].Trigger)
	require.Equal(t, 1, in.Counts["decide"])

	code, body := f.act(t, "decide", ActionRequest{ID: gated, Decision: "accept", By: "dora"}, nil)
	require.Equal(t, http.StatusOK, code, body)
	row := live.until(t, func(r Row) bool { return r.CapsuleID == gated && r.State == capsule.Completed })
	require.False(t, row.NeedsYou)
	f.wait(t, gated, capsule.Completed)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		r, ok := f.console.Index().Lookup(gated)
		return ok && r.State == capsule.Completed
	})
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
	require.Empty(t, in.Decide)

	// A refused action tells why, with the admin service's code.
	code, body = f.act(t, "decide", ActionRequest{ID: gated, Decision: "accept", By: "dora"}, nil)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, `"code":"refused"`)
	code, body = f.act(t, "cancel", ActionRequest{ID: capsuletest.NewID(), By: "dora"}, nil)
	require.Equal(t, http.StatusNotFound, code, body)

	var v CapsuleView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules/"+gated, &v))
	require.Equal(t, capsule.Completed, v.Checkpoint.State.Status)
	require.NotNil(t, v.Caps)
	require.Equal(t, int64(10000), v.Caps.Tokens)
	require.NotNil(t, v.Capsule)
	require.Len(t, v.Checkpoint.History, 7)
	require.NotEmpty(t, v.Checkpoint.State.Reviews)
	var accepted bool
	for _, e := range v.Events {
		accepted = accepted || (e.Kind == capsule.EventOperatorAccepted && e.By == "dora")
	}
	require.True(t, accepted, "the operator's name is on the accepted event")
	require.NotEmpty(t, v.Checkpoint.State.ArtifactRefs)
	var a capsule.Artifact
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/artifact?ref="+url.QueryEscape(v.Checkpoint.State.ArtifactRefs[0]), &a))
	require.Equal(t, gated, a.CapsuleID)
	require.Equal(t, http.StatusBadRequest, f.get(t, "/ui/api/artifact?ref=file:go.mod", nil))
	require.Equal(t, http.StatusNotFound, f.get(t, "/ui/api/artifact?ref="+url.QueryEscape(store.ArtifactRef(capsuletest.NewID(), 1)), nil))
	require.Equal(t, http.StatusNotFound, f.get(t, "/ui/api/capsules/"+capsuletest.NewID(), nil))
	require.Equal(t, http.StatusNotFound, f.get(t, "/ui/api/capsules/no%20such", nil))

	var page Page
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules?state=completed&wave=w-1&phase=HANDOFF", &page))
	require.Equal(t, 1, page.Total)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules?wave=w-2", &page))
	require.Zero(t, page.Total)
	require.Equal(t, http.StatusBadRequest, f.get(t, "/ui/api/capsules?state=asleep", nil))

	// Phases: pause one and resume it through the console.
	var ph adminsvc.PhasesReply
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/phases", &ph))
	require.Len(t, ph.Phases, int(capsule.NumPhases))
	phase := int(capsule.Execution)
	code, body = f.act(t, "phase.pause", ActionRequest{Phase: &phase, By: "dora", Reason: "look"}, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/phases", &ph))
	require.True(t, ph.Phases[phase].Paused)
	// The inbox's banner names it, with who, when and why, and the badge
	// counts it.
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
	require.Len(t, in.Phases, 1)
	require.Equal(t, phase, in.Phases[0].Phase)
	require.Equal(t, "dora", in.Phases[0].PausedBy)
	require.Equal(t, "look", in.Phases[0].PauseReason)
	require.NotNil(t, in.Phases[0].PausedAt)
	require.WithinDuration(t, time.Now(), *in.Phases[0].PausedAt, time.Minute)
	require.Equal(t, 1, in.Counts["phases"])

	// Held at EXECUTION: pause, resume with overrides, cancel.
	held := f.publish(t, capsuletest.New())
	// Its step waits in EXECUTION's queue; its row shows PLANNING until
	// EXECUTION's claim writes the deferred advances.
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		_, ok := f.console.Index().Lookup(held)
		if !ok {
			return false
		}
		cons, err := f.st.JetStream().Consumer(context.Background(), store.PhaseStream(capsule.Execution), store.ConsumerName(capsule.Execution))
		if err != nil {
			return false
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 1
	}, "capsule never reached EXECUTION")
	code, body = f.act(t, "pause", ActionRequest{ID: held, By: "dora", Reason: "check"}, nil)
	require.Equal(t, http.StatusOK, code, body)
	live.until(t, func(r Row) bool {
		return r.CapsuleID == held && r.NeedsYou && r.Trigger == capsule.TriggerOperatorManual
	})
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
	require.Len(t, in.Paused, 1)
	require.Equal(t, "dora", in.Paused[0].By)
	require.Equal(t, "check", in.Paused[0].Reason)
	code, body = f.act(t, "resume", ActionRequest{ID: held, By: "dora", Tokens: 20000, Deadline: "bad"}, nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	code, body = f.act(t, "resume", ActionRequest{ID: held, By: "dora", Tokens: 20000, Deadline: time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339), Answer: "use v2"}, nil)
	require.Equal(t, http.StatusOK, code, body)
	cp, _, err := f.st.Checkpoints.Get(context.Background(), held)
	require.NoError(t, err)
	require.NotNil(t, cp.State.OperatorAnswer, "the resume dialog's answer is recorded for the executor")
	require.Equal(t, "use v2", cp.State.OperatorAnswer.Text)
	require.Equal(t, "dora", cp.State.OperatorAnswer.By)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules/"+held, &v))
	require.Equal(t, int64(20000), v.Caps.Tokens, "caps in force show the override")
	code, body = f.act(t, "cancel", ActionRequest{ID: held, By: "dora"}, nil)
	require.Equal(t, http.StatusOK, code, body)
	f.wait(t, held, capsule.Cancelled)
	code, body = f.act(t, "phase.resume", ActionRequest{Phase: &phase, By: "dora"}, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
	require.Empty(t, in.Phases, "a resumed phase leaves the banner")
	require.Zero(t, in.Counts["phases"])

	var waves WavesView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/waves", &waves))
	require.True(t, waves.Available, "this build's admin service serves wave.list")

	// Retention's delete removes the row and tells the stream.
	kv, err := f.st.JetStream().KeyValue(context.Background(), store.CheckpointsBucket)
	require.NoError(t, err)
	require.NoError(t, kv.Delete(context.Background(), held))
	live.until(t, func(r Row) bool { return r.Key == held && r.Deleted })
	_, ok := f.console.Index().Lookup(held)
	require.False(t, ok)
}

// TestActionsRefuseCrossSite: an action needs the console's header, JSON,
// the same origin and an operator name; anything else is refused before
// the admin service is asked.
func TestActionsRefuseCrossSite(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	id := capsuletest.NewID()
	ok := ActionRequest{ID: id, By: "eve"}
	tests := []struct {
		name string
		verb string
		body any
		hdr  map[string]string
		want int
	}{
		{name: "no console header", verb: "pause", body: ok, hdr: map[string]string{csrfHeader: ""}, want: http.StatusForbidden},
		{name: "form post", verb: "pause", body: ok, hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, want: http.StatusForbidden},
		{name: "other origin", verb: "pause", body: ok, hdr: map[string]string{"Origin": "http://evil.example"}, want: http.StatusForbidden},
		{name: "cross-site fetch", verb: "pause", body: ok, hdr: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden},
		{name: "no operator", verb: "pause", body: ActionRequest{ID: id}, want: http.StatusBadRequest},
		{name: "unknown member", verb: "pause", body: map[string]any{"id": id, "by": "eve", "sudo": true}, want: http.StatusBadRequest},
		{name: "unknown verb", verb: "purge", body: ok, want: http.StatusNotFound},
		{name: "phase missing", verb: "phase.pause", body: ok, want: http.StatusBadRequest},
		{name: "bad decision", verb: "decide", body: ActionRequest{ID: id, By: "eve", Decision: "maybe"}, want: http.StatusBadRequest},
		{name: "same origin reaches the service", verb: "pause", body: ok, want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := f.act(t, tt.verb, tt.body, tt.hdr)
			require.Equal(t, tt.want, code, body)
		})
	}
	resp, err := http.Get(f.srv.URL + "/ui/api/actions/pause")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "actions are POSTs only")
}

// TestPageIsStaticAndLocked: the page is embedded, and its headers allow
// only its own script and style.
func TestPageIsStaticAndLocked(t *testing.T) {
	t.Parallel()
	c, err := New(&store.Store{}, nil, Config{})
	require.NoError(t, err)
	h := c.Handler()
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/app.css": "text/css"} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Host = "127.0.0.1:9464"
		h.ServeHTTP(rec, r)
		require.Equal(t, http.StatusOK, rec.Code, path)
		require.Contains(t, rec.Header().Get("Content-Type"), ctype, path)
		require.Contains(t, rec.Header().Get("Content-Security-Policy"), "script-src 'self'", path)
		require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	}
	js, err := uiFiles.ReadFile("ui/app.js")
	require.NoError(t, err)
	for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "setInterval"} {
		require.NotContains(t, string(js), banned, "the page builds the DOM from text only and never polls")
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/ui/", nil)
	r.Host = "localhost"
	h.ServeHTTP(rec, r)
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

// TestOpenConsoleAnswersLoopbackNamesOnly: without authentication only a
// loopback Host is answered, so a site whose name resolves to 127.0.0.1
// (DNS rebinding) cannot use the browser to read or act.
func TestOpenConsoleAnswersLoopbackNamesOnly(t *testing.T) {
	t.Parallel()
	c, err := New(&store.Store{}, nil, Config{})
	require.NoError(t, err)
	h := c.Handler()
	for host, want := range map[string]int{
		"127.0.0.1:9464": http.StatusOK, "localhost:9464": http.StatusOK, "LOCALHOST": http.StatusOK, "[::1]:9464": http.StatusOK,
		"127.0.0.2": http.StatusOK, "evil.example:9464": http.StatusForbidden, "10.0.0.1:9464": http.StatusForbidden, "": http.StatusForbidden,
	} {
		r := httptest.NewRequest(http.MethodGet, "/ui/app.css", nil)
		r.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		require.Equal(t, want, rec.Code, host)
	}
	// With a token, the name does not matter: the token does.
	c, err = New(&store.Store{}, nil, Config{Token: testToken})
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodGet, "/ui/app.css", nil)
	r.Host = "console.example"
	r.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, r)
	require.Equal(t, http.StatusOK, rec.Code)
}

// TestAuth: with a token or basic auth configured, nothing is served
// without it; the token is taken once from the address and kept in an
// HttpOnly cookie.
func TestAuth(t *testing.T) {
	t.Parallel()
	c, err := New(&store.Store{}, nil, Config{Token: testToken, BasicAuth: "ops:pa55"})
	require.NoError(t, err)
	h := c.Handler()
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	get := func(path string) *http.Request { return httptest.NewRequest(http.MethodGet, path, nil) }

	rec := serve(get("/ui/"))
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Basic")

	rec = serve(get("/ui/?token=wrong"))
	require.Equal(t, http.StatusUnauthorized, rec.Code)

	rec = serve(get("/ui/?token=" + testToken))
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, "/ui/", rec.Header().Get("Location"), "the token leaves the address bar")
	cookies := rec.Result().Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)

	r := get("/ui/app.js")
	r.AddCookie(cookies[0])
	require.Equal(t, http.StatusOK, serve(r).Code)

	r = get("/ui/app.js")
	r.Header.Set("Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusOK, serve(r).Code)
	r = get("/ui/app.js")
	r.Header.Set("Authorization", "Bearer s3cre")
	require.Equal(t, http.StatusUnauthorized, serve(r).Code)

	r = get("/ui/app.js")
	r.SetBasicAuth("ops", "pa55")
	require.Equal(t, http.StatusOK, serve(r).Code)
	r = get("/ui/app.js")
	r.SetBasicAuth("ops", "nope")
	require.Equal(t, http.StatusUnauthorized, serve(r).Code)

	// The token is not taken from an API address (it would sit in logs).
	require.Equal(t, http.StatusUnauthorized, serve(get("/ui/api/inbox?token="+testToken)).Code)

	_, err = New(&store.Store{}, nil, Config{BasicAuth: "nopassword"})
	require.ErrorIs(t, err, ErrBasicAuth)
	_, err = New(&store.Store{}, nil, Config{BasicAuth: ":pw"})
	require.ErrorIs(t, err, ErrBasicAuth)
}

// TestForwardedVerbs: replay and the wave verbs are "not available" while
// no sagad serves them (an older sagad); then the console forwards the
// operator's request as the verb's schema has it.
func TestForwardedVerbs(t *testing.T) {
	t.Parallel()
	f := setupWith(t, Config{}, false)
	var waves WavesView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/waves", &waves))
	require.False(t, waves.Available)
	require.Contains(t, waves.Message, "saga.admin.wave.list")
	code, body := f.act(t, "replay", ActionRequest{ID: "x", By: "eve"}, nil)
	require.Equal(t, http.StatusNotImplemented, code, body)
	require.Contains(t, body, "saga.admin.replay")
	code, body = f.act(t, "wave.close", ActionRequest{WaveID: "w", By: "eve"}, nil)
	require.Equal(t, http.StatusNotImplemented, code, body)

	// A sagad with the verbs (stood in for by plain responders).
	got := make(chan string, 8)
	for subject, reply := range map[string]string{
		"saga.admin.wave.list":  `{"waves":[{"wave_id":"w-1","tokens_cap":3000,"dollars_cap":0,"closed":false,"used":{"tokens":1000,"dollars":0},"reserved":{"tokens":2000,"dollars":0},"running":2,"waiting":["k1"]}]}`,
		"saga.admin.replay":     `{"capsule":{"capsule_id":"x"},"dependents":[]}`,
		"saga.admin.wave.set":   `{"wave_id":"w-1"}`,
		"saga.admin.wave.close": `{"wave_id":"w-1","closed":true}`,
	} {
		sub, err := f.nc.Subscribe(subject, func(m *nats.Msg) {
			got <- m.Subject + " " + string(m.Data)
			_ = m.Respond([]byte(reply))
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, f.nc.Flush())
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/waves", &waves))
	require.True(t, waves.Available)
	require.Contains(t, string(waves.Waves), `"wave_id":"w-1"`)
	<-got

	from, deps := 4, false
	tests := []struct {
		verb string
		body any
		want string
	}{
		{verb: "replay", body: ActionRequest{ID: "x", By: "eve", Reason: "fixed", FromPhase: &from, Dependents: &deps},
			want: `saga.admin.replay {"by":"eve","dependents":false,"from_phase":4,"id":"x","reason":"fixed"}`},
		{verb: "replay", body: ActionRequest{ID: "x", By: "eve"}, want: `saga.admin.replay {"by":"eve","id":"x"}`},
		{verb: "wave.set", body: map[string]any{"wave_id": "w-1", "by": "eve", "tokens": 5000},
			want: `saga.admin.wave.set {"by":"eve","tokens":5000,"wave_id":"w-1"}`},
		{verb: "wave.close", body: ActionRequest{WaveID: "w-1", By: "eve", Reason: "done"},
			want: `saga.admin.wave.close {"by":"eve","reason":"done","wave_id":"w-1"}`},
	}
	for _, tt := range tests {
		code, body := f.act(t, tt.verb, tt.body, nil)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, tt.want, <-got)
	}
}

// testToken is a token long enough for the console (MinTokenLen).
const testToken = "s3cret-s3cret-s3cret-s3cret-s3cret"

// TestTokenTooShort: a token a guesser could find is refused at start.
func TestTokenTooShort(t *testing.T) {
	t.Parallel()
	_, err := New(&store.Store{}, nil, Config{Token: strings.Repeat("x", MinTokenLen-1)})
	require.ErrorIs(t, err, ErrTokenTooShort)
	_, err = New(&store.Store{}, nil, Config{Token: strings.Repeat("x", MinTokenLen)})
	require.NoError(t, err)
}

// TestAuthRateLimited plays a guesser: wrong tokens, cookies and passwords
// from one address are answered 429 with Retry-After once its allowance is
// spent, even the right token then; another address is not held up, and
// the allowance comes back with time.
func TestAuthRateLimited(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c, err := New(&store.Store{}, nil, Config{Token: testToken, BasicAuth: "ops:pa55", Now: clock})
	require.NoError(t, err)
	h := c.Handler()
	serve := func(addr string, set func(r *http.Request)) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/ui/app.js", nil)
		r.RemoteAddr = addr
		set(r)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	bearer := func(tok string) func(r *http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	guesses := []func(r *http.Request){
		bearer("guess"),
		func(r *http.Request) { r.SetBasicAuth("ops", "guess") },
		func(r *http.Request) { r.AddCookie(&http.Cookie{Name: cookieName, Value: "guess"}) },
	}
	// A first visit without credentials costs nothing.
	for range 3 * failureBurst {
		require.Equal(t, http.StatusUnauthorized, serve("198.51.100.7:1", func(*http.Request) {}).Code)
	}
	for i := range failureBurst {
		require.Equal(t, http.StatusUnauthorized, serve("198.51.100.7:1", guesses[i%len(guesses)]).Code, "guess %d", i)
	}
	rec := serve("198.51.100.7:2", bearer("guess"))
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, serve("198.51.100.7:3", bearer(testToken)).Code, "no guess is looked at while blocked")
	require.Equal(t, http.StatusOK, serve("203.0.113.9:1", bearer(testToken)).Code, "another address is not held up")

	mu.Lock()
	now = now.Add(failureEvery)
	mu.Unlock()
	require.Equal(t, http.StatusOK, serve("198.51.100.7:1", bearer(testToken)).Code)
	require.Equal(t, http.StatusUnauthorized, serve("198.51.100.7:1", bearer("guess")).Code)
	require.Equal(t, http.StatusTooManyRequests, serve("198.51.100.7:1", bearer("guess")).Code)
}
