package executors_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/agenttest"
	"github.com/sagad/sagad/internal/natstest"
)

// recorder is a CallObserver that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	progress []executors.CallProgress
	queries  []executors.AgentQuery
}

func (r *recorder) Progress(p executors.CallProgress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress = append(r.progress, p)
}

func (r *recorder) Query(q executors.AgentQuery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, q)
}

func (r *recorder) lastQuery() (executors.AgentQuery, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queries) == 0 {
		return executors.AgentQuery{}, false
	}
	return r.queries[len(r.queries)-1], true
}

// agentSetup starts a host with handler on its own connection and returns
// sagad's connection and the host.
func agentSetup(t *testing.T, cfg agenttest.Config) (*nats.Conn, *agenttest.Host) {
	t.Helper()
	client, worker := natsSetup(t)
	if cfg.Agent == "" {
		cfg.Agent = "tester"
	}
	h, err := agenttest.Start(worker, cfg)
	require.NoError(t, err)
	t.Cleanup(h.Stop)
	require.NoError(t, worker.Flush())
	return client, h
}

func agentExec(nc *nats.Conn, subject string) executors.AgentExecutor {
	return executors.AgentExecutor{AgentEndpoint: executors.AgentEndpoint{Conn: nc, Name: "k", Subject: subject, Timeout: 10 * time.Second, IdleTimeout: 5 * time.Second}}
}

func TestAgentExecutorStreamsTheArtifact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		handler agenttest.Handler
		want    capsule.Usage
	}{
		{"no usage: estimated", agenttest.Echo, capsule.Usage{Estimated: true}},
		{"cost and usage", func(ctx context.Context, req agenttest.Request, s *agenttest.Stream) {
			agenttest.Echo(ctx, req, s)
			s.Cost(0.25)
			s.Usage(100, 20)
			s.Cost(0.5)
		}, capsule.Usage{Tokens: 120, Dollars: 0.75}},
		{"cost only: tokens estimated", func(ctx context.Context, req agenttest.Request, s *agenttest.Stream) {
			agenttest.Echo(ctx, req, s)
			s.Cost(0.1)
		}, capsule.Usage{Dollars: 0.1, Estimated: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, h := agentSetup(t, agenttest.Config{Handler: tc.handler})
			rec := &recorder{}
			req := execRequest(t)
			res, err := agentExec(nc, h.Subject()).Execute(executors.WithObserver(context.Background(), rec), req)
			require.NoError(t, err)
			text := executors.ArtifactText(res.Content)
			require.True(t, strings.HasPrefix(text, "# Answer\n\nYou asked: "), text)
			require.Equal(t, executors.TextMediaType, res.MediaType)
			if tc.want.Estimated {
				// ceil(bytes of the prompt envelope and the text / 4).
				require.Greater(t, res.Usage.Tokens, int64(len(text)/4))
				tc.want.Tokens = res.Usage.Tokens
			}
			require.Equal(t, tc.want, res.Usage)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.NotEmpty(t, rec.progress)
			last := rec.progress[len(rec.progress)-1]
			require.True(t, last.Done)
			require.Equal(t, "tester.test.main", last.Agent)
			require.Equal(t, text, last.Text)
			require.Equal(t, int64(len(text)), last.Bytes)
		})
	}
}

func TestAgentReviewerVerdict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		text    string
		verdict capsule.Verdict
		err     string
	}{
		{"fenced", "Looks fine.\n```json\n{\"verdict\": \"CHANGES_REQUESTED\", \"findings\": [{\"message\": \"add tests\", \"severity\": \"major\"}]}\n```\n", capsule.ChangesRequested, ""},
		{"bare, last wins", `{"verdict":"REJECTED","findings":[{"message":"x"}]} then {"verdict":"APPROVED","findings":[]}`, capsule.Approved, ""},
		{"none", "I like it.", "", "no JSON object"},
		{"malformed", `{"verdict":"MAYBE","findings":[]}`, "", `verdict "MAYBE"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, h := agentSetup(t, agenttest.Config{Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
				s.Ack()
				half := len(tc.text) / 2
				s.Text(tc.text[:half])
				s.TextObject(tc.text[half:])
			}})
			rv := executors.AgentReviewer{AgentEndpoint: executors.AgentEndpoint{Conn: nc, Subject: h.Subject(), Name: "r"}}
			res, err := rv.Review(context.Background(), reviewRequest(t))
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.verdict, res.Verdict)
				return
			}
			var f *executors.FailedError
			require.ErrorAs(t, err, &f)
			require.Contains(t, f.Finding, tc.err)
			require.True(t, f.Retryable, "the self-heal retry tells the agent what was wrong")
			require.True(t, f.Usage.Estimated)
			require.Positive(t, f.Usage.Tokens)
		})
	}
}

func TestAgentFailures(t *testing.T) {
	t.Parallel()
	errFrame := func(code int) agenttest.Handler {
		return func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
			s.Ack()
			s.Text("partial")
			s.Error(code, "went wrong\nbadly")
		}
	}
	for _, tc := range []struct {
		name      string
		cfg       agenttest.Config
		subject   string
		retryable bool
		timeout   bool
		detail    string
	}{
		{name: "403 halts", cfg: agenttest.Config{Handler: errFrame(403)}, detail: "agent error 403: went wrong badly"},
		{name: "400 halts", cfg: agenttest.Config{Handler: errFrame(400)}, detail: "agent error 400"},
		{name: "408 retries", cfg: agenttest.Config{Handler: errFrame(408)}, retryable: true, detail: "agent error 408"},
		{name: "409 retries", cfg: agenttest.Config{Handler: errFrame(409)}, retryable: true, detail: "agent error 409"},
		{name: "429 retries", cfg: agenttest.Config{Handler: errFrame(429)}, retryable: true, detail: "agent error 429"},
		{name: "500 retries", cfg: agenttest.Config{Handler: errFrame(500)}, retryable: true, detail: "agent error 500"},
		{name: "no responders", subject: "agents.prompt.nobody.test.main", retryable: true, detail: "no responders on agents.prompt.nobody.test.main"},
		{name: "idle", cfg: agenttest.Config{Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
			s.Ack()
			<-ctx.Done()
		}}, retryable: true, timeout: true, detail: "idle_timeout"},
		{name: "not JSON", cfg: agenttest.Config{Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
			s.Raw([]byte("plain text"))
		}}, detail: "not a JSON object"},
		{name: "no text", cfg: agenttest.Config{Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) { s.Ack() }}, retryable: true, detail: "no text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, h := agentSetup(t, tc.cfg)
			ex := agentExec(nc, h.Subject())
			ex.IdleTimeout = 300 * time.Millisecond
			if tc.subject != "" {
				ex.Subject = tc.subject
			}
			_, err := ex.Execute(context.Background(), execRequest(t))
			var f *executors.FailedError
			require.ErrorAs(t, err, &f)
			require.Contains(t, f.Detail, tc.detail)
			require.Equal(t, tc.retryable, f.Retryable, f.Detail)
			require.Equal(t, tc.timeout, f.Timeout, f.Detail)
			if strings.HasPrefix(tc.name, "4") {
				require.Contains(t, f.Finding, tc.detail, "the code and description are the finding")
			}
			require.True(t, f.Usage.Estimated, "a failed call is charged its estimate")
		})
	}
}

func TestAgentHeartbeatsStop(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	nc, h := agentSetup(t, agenttest.Config{Heartbeat: 100 * time.Millisecond, Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		close(started)
		// Keep-alives, but the agent's heartbeats stop.
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.Ack()
			}
		}
	}})
	dir := executors.NewAgentDirectory(nc)
	require.NoError(t, dir.Start())
	t.Cleanup(dir.Stop)
	natstest.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool {
		insts, err := dir.List(context.Background())
		return err == nil && len(insts) == 1 && insts[0].Alive
	})
	ex := agentExec(nc, h.Subject())
	ex.Directory = dir
	go func() {
		<-started
		h.StopHeartbeats()
	}()
	_, err := ex.Execute(context.Background(), execRequest(t))
	var f *executors.FailedError
	require.ErrorAs(t, err, &f)
	require.Contains(t, f.Detail, "heartbeats stopped")
	require.True(t, f.Retryable)
}

func TestAgentCancelStopsReading(t *testing.T) {
	t.Parallel()
	nc, h := agentSetup(t, agenttest.Config{Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		<-ctx.Done()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{}
	go func() {
		natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return len(rec.progress) > 0
		})
		cancel()
	}()
	_, err := agentExec(nc, h.Subject()).Execute(executors.WithObserver(ctx, rec), execRequest(t))
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, err.Error(), "stopped reading the stream")
	var f *executors.FailedError
	require.False(t, errors.As(err, &f), "a cancel is no failure of the agent")
}

func TestAgentQueryReachesObserverAndAnswerReachesAgent(t *testing.T) {
	t.Parallel()
	answered := make(chan string, 1)
	nc, h := agentSetup(t, agenttest.Config{Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		answer, ok := s.Ask(ctx, "q1", "Which database?")
		if !ok {
			s.Error(408, "no answer")
			return
		}
		answered <- answer
		s.Text("Using " + answer)
	}})
	rec := &recorder{}
	go func() {
		var q executors.AgentQuery
		natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
			var ok bool
			q, ok = rec.lastQuery()
			return ok
		})
		// What the pause/answer side does: publish the answer, fire and
		// forget, on sagad's connection.
		_ = nc.Publish(q.ReplySubject, []byte("postgres"))
	}()
	res, err := agentExec(nc, h.Subject()).Execute(executors.WithObserver(context.Background(), rec), execRequest(t))
	require.NoError(t, err)
	require.Equal(t, "postgres", <-answered)
	require.Equal(t, "Using postgres", executors.ArtifactText(res.Content))
	q, _ := rec.lastQuery()
	require.Equal(t, "q1", q.ID)
	require.Equal(t, "Which database?", q.Prompt)
	require.Equal(t, "tester.test.main", q.Agent)
}

func TestAgentDiscovery(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	for _, cfg := range []agenttest.Config{
		{Agent: "coder", Owner: "alice", Session: "one"},
		{Agent: "coder", Owner: "bob", Session: "two"},
		{Agent: "oldie", Version: "0.2"},
	} {
		h, err := agenttest.Start(worker, cfg)
		require.NoError(t, err)
		t.Cleanup(h.Stop)
	}
	require.NoError(t, worker.Flush())
	dir := executors.NewAgentDirectory(client)
	require.NoError(t, dir.Start())
	t.Cleanup(dir.Stop)
	ctx := context.Background()

	inst, err := dir.Pick(ctx, "", executors.AgentSelector{Agent: "coder", Owner: "bob"})
	require.NoError(t, err)
	require.Equal(t, "agents.prompt.coder.bob.two", inst.PromptSubject)
	require.Equal(t, int64(1<<20), inst.MaxPayload)

	_, err = dir.Pick(ctx, "", executors.AgentSelector{Agent: "coder", Owner: "carol"})
	require.ErrorIs(t, err, executors.ErrAgentNotFound)

	_, err = dir.Pick(ctx, "", executors.AgentSelector{Agent: "oldie"})
	require.ErrorIs(t, err, executors.ErrAgentVersion)
	require.ErrorIs(t, dir.Check(ctx, "", executors.AgentSelector{Agent: "oldie"}), executors.ErrAgentVersion)
	require.NoError(t, dir.Check(ctx, "", executors.AgentSelector{Agent: "not-running"}), "an agent not running yet passes")

	ex := executors.AgentExecutor{AgentEndpoint: executors.AgentEndpoint{Conn: client, Name: "k", Directory: dir, Select: executors.AgentSelector{Agent: "coder", Session: "one"}}}
	res, err := ex.Execute(ctx, execRequest(t))
	require.NoError(t, err)
	require.Contains(t, executors.ArtifactText(res.Content), "You asked")

	insts, err := dir.List(ctx)
	require.NoError(t, err)
	require.Len(t, insts, 3)
}

// TestAgentAttachments: an agent whose prompt endpoint says attachments_ok
// gets the context artifacts as attachments (standard base64, numbered
// basenames) and a prompt naming them; one that does not gets them inline.
func TestAgentAttachments(t *testing.T) {
	t.Parallel()
	for _, ok := range []bool{true, false} {
		t.Run(fmt.Sprint("attachments_ok=", ok), func(t *testing.T) {
			t.Parallel()
			got := make(chan agenttest.Request, 1)
			client, _ := agentSetup(t, agenttest.Config{Agent: "reader", AttachmentsOK: ok, Handler: func(ctx context.Context, req agenttest.Request, s *agenttest.Stream) {
				got <- req
				agenttest.Echo(ctx, req, s)
			}})
			dir := executors.NewAgentDirectory(client)
			require.NoError(t, dir.Start())
			t.Cleanup(dir.Stop)
			req := execRequest(t)
			req.ContextArtifacts = []capsule.Artifact{{Ref: "file:docs/guide.md", Content: json.RawMessage(`"# Guide\nread me"`)}}
			ex := executors.AgentExecutor{AgentEndpoint: executors.AgentEndpoint{Conn: client, Directory: dir, Select: executors.AgentSelector{Agent: "reader"}}}
			_, err := ex.Execute(context.Background(), req)
			require.NoError(t, err)
			r := <-got
			if !ok {
				require.Empty(t, r.Envelope.Attachments)
				require.Contains(t, r.Envelope.Prompt, "# Guide\nread me")
				return
			}
			require.Len(t, r.Envelope.Attachments, 1)
			a := r.Envelope.Attachments[0]
			require.Equal(t, "1-guide.md", a.Filename)
			b, err := base64.StdEncoding.DecodeString(a.Content)
			require.NoError(t, err)
			require.Equal(t, "# Guide\nread me", string(b))
			require.Contains(t, r.Envelope.Prompt, "[attached as 1-guide.md")
			require.NotContains(t, r.Envelope.Prompt, "read me")
		})
	}
}

// TestAgentFastStreamLosesNoChunk: an agent streaming thousands of small
// chunks as fast as it can (a per-token host) gets every one into the
// artifact, in order.
func TestAgentFastStreamLosesNoChunk(t *testing.T) {
	t.Parallel()
	const n = 5000
	nc, h := agentSetup(t, agenttest.Config{Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		for i := range n {
			s.Text(fmt.Sprintf("%d ", i))
		}
	}})
	res, err := agentExec(nc, h.Subject()).Execute(executors.WithObserver(context.Background(), &recorder{}), execRequest(t))
	require.NoError(t, err)
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "%d ", i)
	}
	require.Equal(t, want.String(), executors.ArtifactText(res.Content))
}

// TestCheckAgentsRefusesAnotherVersion: a configured agent answering
// discovery with protocol 0.2 is refused at start; 0.3.x passes, and so
// does an agent not running yet.
func TestCheckAgentsRefusesAnotherVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		err     bool
	}{{"0.2", true}, {"1.3", true}, {"0.3.4", false}, {"", false}} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			client, worker := natsSetup(t)
			if tc.version != "" {
				h, err := agenttest.Start(worker, agenttest.Config{Agent: "cc", Owner: "alice", Version: tc.version})
				require.NoError(t, err)
				t.Cleanup(h.Stop)
				require.NoError(t, worker.Flush())
			}
			reg, err := executors.Config{Executors: map[string]executors.Endpoint{
				"code": {Type: executors.EndpointAgent, Subject: "agents.prompt.cc.alice.main"},
			}}.Build(client)
			require.NoError(t, err)
			t.Cleanup(reg.AgentDirectory().Stop)
			err = reg.CheckAgents(context.Background())
			if tc.err {
				require.ErrorIs(t, err, executors.ErrAgentVersion)
				require.ErrorContains(t, err, `"code"`)
				return
			}
			require.NoError(t, err)
		})
	}
}

// TestAgentConfig: what an agent endpoint's configuration refuses.
func TestAgentConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ep   executors.Endpoint
		want string
	}{
		{executors.Endpoint{Type: "agent"}, `.agent: required for type "agent" without a subject`},
		{executors.Endpoint{Type: "agent", Subject: "agents.demo.execute"}, "want agents.prompt.<agent>.<owner>.<session>"},
		{executors.Endpoint{Type: "agent", Subject: "agents.prompt.a.o.s", Agent: "a"}, "not both"},
		{executors.Endpoint{Type: "agent", Agent: "a.b"}, "not one subject token"},
		{executors.Endpoint{Type: "agent", Agent: "a", Owner: "*"}, "not one subject token"},
		{executors.Endpoint{Type: "agent", Agent: "a", IdleTimeout: "soon"}, "idle_timeout"},
		{executors.Endpoint{Type: "agent", Agent: "a", PromptTemplate: "/nonexistent.tmpl"}, "prompt_template"},
		{executors.Endpoint{Type: "nats", Subject: "x.y", IdleTimeout: "1s"}, `.idle_timeout: not used by type "nats"`},
	} {
		err := executors.Config{Executors: map[string]executors.Endpoint{"k": tc.ep}}.Validate()
		require.ErrorContains(t, err, tc.want, "%+v", tc.ep)
	}
	require.NoError(t, executors.Config{Executors: map[string]executors.Endpoint{"k": {Type: "agent", Agent: "cc", Owner: "alice", Session: "main", Timeout: "20m", IdleTimeout: "2m"}}}.Validate())
}

// TestAgentQueryReplyOutsideInboxDropped: in an account sagad shares with
// the agent, a query whose reply_subject is not an _INBOX subject (here
// one of sagad's) never reaches the observer, so no answer is published
// there; the call goes on.
func TestAgentQueryReplyOutsideInboxDropped(t *testing.T) {
	t.Parallel()
	nc, h := agentSetup(t, agenttest.Config{Handler: func(_ context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		s.Raw([]byte(`{"type":"query","data":{"id":"q","reply_subject":"saga.complete.x.1","prompt":"?"}}`))
		s.Raw([]byte(`{"type":"query","data":{"id":"q2","reply_subject":"_INBOX.ok","prompt":"?"}}`))
		s.Text("done")
	}})
	rec := &recorder{}
	_, err := agentExec(nc, h.Subject()).Execute(executors.WithObserver(context.Background(), rec), execRequest(t))
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.queries, 1)
	require.Equal(t, "_INBOX.ok", rec.queries[0].ReplySubject)
}

// TestAgentQueryPausesIdleTimeout: while the agent waits, silent, for the
// answer to its question, idle_timeout does not run; a question sagad
// dropped (its reply subject unreachable) does not stop it.
func TestAgentQueryPausesIdleTimeout(t *testing.T) {
	t.Parallel()
	nc, h := agentSetup(t, agenttest.Config{Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		answer, ok := s.Ask(ctx, "q1", "Which database?")
		if !ok {
			return
		}
		s.Text("Using " + answer)
	}})
	rec := &recorder{}
	go func() {
		var q executors.AgentQuery
		natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
			var ok bool
			q, ok = rec.lastQuery()
			return ok
		})
		time.Sleep(time.Second) // over three idle timeouts
		_ = nc.Publish(q.ReplySubject, []byte("postgres"))
	}()
	ex := agentExec(nc, h.Subject())
	ex.IdleTimeout = 300 * time.Millisecond
	res, err := ex.Execute(executors.WithObserver(context.Background(), rec), execRequest(t))
	require.NoError(t, err)
	require.Equal(t, "Using postgres", executors.ArtifactText(res.Content))

	nc, h = agentSetup(t, agenttest.Config{Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		s.Raw([]byte(`{"type":"query","data":{"id":"q","reply_subject":"saga.complete.x.1","prompt":"?"}}`))
		<-ctx.Done()
	}})
	ex = agentExec(nc, h.Subject())
	ex.IdleTimeout = 300 * time.Millisecond
	_, err = ex.Execute(executors.WithObserver(context.Background(), &recorder{}), execRequest(t))
	require.ErrorContains(t, err, "idle_timeout")
}

// TestAgentProgressNotHeldWhileQuiet: chunks that came within
// progressEvery of a report reach the observer once the stream goes quiet,
// here while the agent waits for an answer: the call's view shows the
// whole stream so far, not its first chunk, for as long as a person takes.
func TestAgentProgressNotHeldWhileQuiet(t *testing.T) {
	t.Parallel()
	nc, h := agentSetup(t, agenttest.Config{Handler: func(ctx context.Context, _ agenttest.Request, s *agenttest.Stream) {
		s.Ack()
		s.Text("partial ")
		answer, ok := s.Ask(ctx, "q1", "Which database?")
		if !ok {
			return
		}
		s.Text(answer)
	}})
	rec := &recorder{}
	go func() {
		natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			n := len(rec.progress)
			return n > 0 && rec.progress[n-1].Chunks == 3 && rec.progress[n-1].Bytes == int64(len("partial "))
		}, "the observer never saw the three chunks before the answer")
		q, _ := rec.lastQuery()
		_ = nc.Publish(q.ReplySubject, []byte("postgres"))
	}()
	res, err := agentExec(nc, h.Subject()).Execute(executors.WithObserver(context.Background(), rec), execRequest(t))
	require.NoError(t, err)
	require.Equal(t, "partial postgres", executors.ArtifactText(res.Content))
}
