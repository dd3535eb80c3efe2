package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/internal/testreq"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// alertsFile is the rule file Prometheus loads (deploy/prometheus).
const alertsFile = "../../../deploy/prometheus/alerts.yml"

// hangingExecutor never answers: its capsule holds EXECUTION, a stall.
type hangingExecutor struct{}

func (hangingExecutor) Execute(ctx context.Context, _ executors.Request) (executors.Result, error) {
	<-ctx.Done()
	return executors.Result{}, ctx.Err()
}

// failingExecutor fails every call: its capsule halts executor_failed.
type failingExecutor struct{}

func (failingExecutor) Execute(context.Context, executors.Request) (executors.Result, error) {
	return executors.Result{}, &executors.FailedError{Detail: "the worker gave up"}
}

// scraper scrapes /metrics the way Prometheus does: every sample of one
// scrape with the job and instance labels added, and up 1 or 0.
type scraper struct {
	t      *testing.T
	url    string
	hc     *http.Client
	series map[string][]string // series → value per scrape ("_": absent)
	n      int
}

// scrape scrapes once; record keeps the samples as the next minute's.
func (s *scraper) scrape(record bool) (map[string]string, bool) {
	s.t.Helper()
	got := map[string]string{}
	ok := false
	if resp, err := s.hc.Get(s.url); err == nil {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "sagad_") {
				continue // comments, Go and process metrics
			}
			i := strings.LastIndexByte(line, ' ')
			got[withTarget(line[:i])] = line[i+1:]
		}
		_ = resp.Body.Close()
		ok = resp.StatusCode == http.StatusOK && sc.Err() == nil
	}
	if !record {
		return got, ok
	}
	up := "0"
	if ok {
		up = "1"
	}
	got[withTarget("up")] = up
	for k := range s.series {
		if _, seen := got[k]; !seen {
			s.series[k] = append(s.series[k], "_")
		}
	}
	for k, v := range got {
		if _, known := s.series[k]; !known {
			s.series[k] = slices.Repeat([]string{"_"}, s.n)
		}
		s.series[k] = append(s.series[k], v)
	}
	s.n++
	return got, ok
}

// withTarget adds the labels Prometheus adds to a scraped series.
func withTarget(series string) string {
	const target = `job="sagad",instance="sagad-1:8080"`
	if strings.HasSuffix(series, "}") {
		if strings.HasSuffix(series, "{}") {
			return strings.TrimSuffix(series, "}") + target + "}"
		}
		return strings.TrimSuffix(series, "}") + "," + target + "}"
	}
	return series + "{" + target + "}"
}

// sampleOf is one series' value in a scrape, "" when absent.
func sampleOf(scrape map[string]string, series string) string { return scrape[withTarget(series)] }

// TestAlertsFireOnALiveSagad drives a running sagad (real pipeline on an
// embedded server, stub workers) into the condition of every alert of
// deploy/prometheus/alerts.yml — a capsule waiting at the operator gate, a
// stream that refuses every write, a phase with work and no progress,
// forged completions, halts, a lost step rescued, a phase paused for
// hours, no scrape answered —
// scrapes its /metrics as Prometheus would, and has promtool evaluate the
// rules over those samples: each alert must fire. Scrape k stands for
// minute k (the real seconds between scrapes are the minutes the rules
// wait for); after the last, the samples are held as they were, as a
// sagad left in that state would go on reporting them.
func TestAlertsFireOnALiveSagad(t *testing.T) {
	promtool := testreq.Program(t, "apt-get install prometheus (it ships promtool)", "promtool")
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	log := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg, m, err := newRegistry(js, log)
	require.NoError(t, err)
	mon := newMonitor(Config{UnhealthyAfter: Duration(300 * time.Millisecond), StallAfter: Duration(time.Hour)}, log, m)
	t.Cleanup(mon.Stop)
	execs := executors.NewRegistry()
	execs.RegisterExecutor("hang", hangingExecutor{})
	execs.RegisterExecutor("fail", failingExecutor{})
	workspace := capsuletest.Workspace(t)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: log, Workspace: workspace, Metrics: m, Health: mon, Executors: execs,
		RetryDelay: 50 * time.Millisecond, WriteTimeout: time.Second, RescueAfter: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	var ready atomic.Bool
	ready.Store(true)
	web := httptest.NewServer(httpHandler(nc, js, reg, &ready, mon))
	t.Cleanup(web.Close)
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	sc := &scraper{t: t, url: web.URL + "/metrics", hc: hc, series: map[string][]string{}}
	cl, err := client.NewClient(ctx, js)
	require.NoError(t, err)
	// own gives a capsule its own target and lock: capsules of this test
	// do not wait for one another's locks.
	own := func(d capsuletest.Doc) capsuletest.Doc {
		name := "own-" + d.ID() + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(workspace, name), []byte("x"), 0o644))
		return d.Set("target", "file:"+name).Set("constraints.resource_locks_required", []any{name})
	}
	publish := func(d capsuletest.Doc) {
		_, err := cl.Publish(ctx, d.Sealed(t), "")
		require.NoError(t, err)
	}
	status := func(id string) client.Status {
		s, _ := cl.Status(ctx, id)
		return s
	}
	// until scrapes until cond holds, then records that scrape as the
	// next minute: the samples of each minute are the state reached, the
	// real time it took is not the rules' business.
	until := func(what string, cond func(map[string]string) bool) {
		t.Helper()
		natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
			got, ok := sc.scrape(false)
			return ok && cond(got)
		}, "never: %s", what)
		got, ok := sc.scrape(true)
		require.True(t, ok)
		require.True(t, cond(got), "%s, and no more", what)
	}
	atLeast := func(got map[string]string, series string, min float64) bool {
		var v float64
		_, err := fmt.Sscan(sampleOf(got, series), &v)
		return err == nil && v >= min
	}

	_, ok := sc.scrape(true) // minute 0: a sagad at rest
	require.True(t, ok)

	// A capsule waits for an operator decision.
	gated := own(capsuletest.New().Set("review.operator_gate", true))
	publish(gated)
	// Five halt (their worker fails), one completes after its step is lost
	// and rescued: PLANNING is paused, its queue purged, then resumed.
	var failing []string
	for range 5 {
		d := own(capsuletest.New().Set("task.kind", "fail"))
		publish(d)
		failing = append(failing, d.ID())
	}
	// Paused through the pipeline's own admin, whose view of the pauses
	// has it at once: REALITY_ANCHOR writes the capsule at the paused
	// PLANNING. A pause made behind its back is seen with the server's
	// advisory, and until then REALITY_ANCHOR defers past it: the
	// checkpoint would show REALITY_ANCHOR, and the rescue count that
	// phase.
	planning := store.PhaseStream(capsule.Planning)
	require.NoError(t, p.Admin().PausePhase(ctx, capsule.Planning))
	lost := own(capsuletest.New())
	publish(lost)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return status(lost.ID()).Phase == int(capsule.Planning) },
		"the capsule never reached PLANNING")
	st, err := js.Stream(ctx, planning)
	require.NoError(t, err)
	require.NoError(t, st.Purge(ctx))
	require.NoError(t, p.Admin().ResumePhase(ctx, capsule.Planning))
	// A value sagad did not write waits under a capsule's key (an
	// acknowledgement, as a redirected reply would leave it): RECEPTION
	// reports it once and takes the key over.
	forged := own(capsuletest.New())
	cps, err := js.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	_, err = cps.Put(ctx, forged.ID(), []byte(`{"stream":"KV_SAGA_CHECKPOINTS","seq":1}`))
	require.NoError(t, err)
	publish(forged)
	// A completion forged for the gated capsule: no token.
	require.NoError(t, nc.Publish(executors.CompletionSubject(gated.ID(), 1), []byte(`{"kind":"execute","status":"ok","content":{"forged":true}}`)))

	until("the gate counted, five halted, one rescued, a forgery terminated, a foreign value counted", func(got map[string]string) bool {
		for _, id := range failing {
			if status(id).State != capsule.Halted {
				return false
			}
		}
		return status(lost.ID()).State == capsule.Completed &&
			sampleOf(got, `sagad_capsules_paused{trigger="operator_gate"}`) == "1" &&
			atLeast(got, `sagad_messages_terminated_total{cause="completion_unauthenticated"}`, 1) &&
			atLeast(got, `sagad_capsules_rescued_total{phase="PLANNING"}`, 1) &&
			atLeast(got, `sagad_corrupt_values_total{bucket="SAGA_CHECKPOINTS"}`, 1)
	})

	// HANDOFF was paused by an operator five hours ago (its record says
	// so) and nobody resumed it.
	handoff := store.PhaseStream(capsule.Handoff)
	hcons, err := js.Consumer(ctx, handoff, store.ConsumerName(capsule.Handoff))
	require.NoError(t, err)
	hcfg := hcons.CachedInfo().Config
	pausedAt := time.Now().Add(-5 * time.Hour)
	hcfg.Metadata = capsule.PhasePause{By: "alice", Reason: "forgotten", At: pausedAt}.SetMetadata(hcfg.Metadata)
	_, err = js.UpdateConsumer(ctx, handoff, hcfg)
	require.NoError(t, err)
	_, err = js.PauseConsumer(ctx, handoff, store.ConsumerName(capsule.Handoff), pausedAt.Add(capsule.PhasePauseHorizon))
	require.NoError(t, err)
	until("HANDOFF paused for five hours", func(got map[string]string) bool {
		return atLeast(got, `sagad_phase_paused_seconds{phase="HANDOFF"}`, 5*3600)
	})

	// A capsule whose worker never answers holds EXECUTION: no progress.
	stuck := own(capsuletest.New().Set("task.kind", "hang"))
	publish(stuck)
	until("EXECUTION holds the hanging capsule", func(got map[string]string) bool {
		return atLeast(got, `sagad_consumer_ack_pending_messages{phase="EXECUTION"}`, 1)
	})
	// PLANNING's stream refuses every write (its store limit), and a new
	// capsule's step to it is retried on and on.
	info, err := js.Stream(ctx, planning)
	require.NoError(t, err)
	cfg := info.CachedInfo().Config
	cfg.MaxBytes, cfg.Discard = 1, jetstream.DiscardNew
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	publish(own(capsuletest.New()))
	until("writes failing", func(got map[string]string) bool {
		return sampleOf(got, "sagad_jetstream_writes_failing") == "1"
	})
	// Minutes pass in that state: long enough for every rule's window and
	// for: (the longest, 15m without a transition plus 5m, and 10m of
	// errors); failed writes go on between the scrapes.
	for range 25 {
		time.Sleep(100 * time.Millisecond) // a scrape interval, not a synchronisation
		_, ok := sc.scrape(true)
		require.True(t, ok)
	}
	last := sc.n - 1

	// sagad's HTTP listener goes away: scrapes fail.
	web.Close()
	hc.CloseIdleConnections()
	live := sc.n
	for range 4 {
		_, ok := sc.scrape(true)
		require.False(t, ok)
	}

	// Everything sagad reported, held after the last live scrape.
	hold := func(vs []string, upTo, extra int) string {
		vs = slices.Clone(vs[:upTo])
		for range extra {
			vs = append(vs, vs[len(vs)-1])
		}
		return strings.Join(vs, " ")
	}
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type sample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	type exprTest struct {
		Expr       string   `yaml:"expr"`
		EvalTime   string   `yaml:"eval_time"`
		ExpSamples []sample `yaml:"exp_samples"`
	}
	type group struct {
		Interval  string     `yaml:"interval"`
		Name      string     `yaml:"name"`
		Input     []series   `yaml:"input_series"`
		ExprTests []exprTest `yaml:"promql_expr_test"`
	}
	firing := func(alert string, at time.Duration) exprTest {
		return exprTest{
			Expr:       fmt.Sprintf(`clamp_max(count(ALERTS{alertname=%q, alertstate="firing"}), 1)`, alert),
			EvalTime:   at.String(),
			ExpSamples: []sample{{Labels: "{}", Value: 1}},
		}
	}
	var running, down, absent []series
	for k, vs := range sc.series {
		if strings.HasPrefix(k, "up{") {
			down = append(down, series{k, hold(vs, len(vs), 5)})
			running = append(running, series{k, hold(vs, live, 70)})
			continue
		}
		running = append(running, series{k, hold(vs, live, 70)})
		absent = append(absent, series{k, hold(vs, live, 10)})
	}
	for _, g := range [][]series{running, down, absent} {
		slices.SortFunc(g, func(a, b series) int { return strings.Compare(a.Series, b.Series) })
	}
	minute := func(n int) time.Duration { return time.Duration(n) * time.Minute }
	doc := struct {
		RuleFiles          []string `yaml:"rule_files"`
		EvaluationInterval string   `yaml:"evaluation_interval"`
		Tests              []group  `yaml:"tests"`
	}{
		RuleFiles:          []string{"alerts.yml"},
		EvaluationInterval: "1m",
		Tests: []group{
			{Interval: "1m", Name: "a live sagad driven into every condition", Input: running, ExprTests: []exprTest{
				firing("SagadJetStreamWritesFailing", minute(last)),
				firing("SagadJetStreamWriteErrors", minute(last)),
				firing("SagadPhaseStalled", minute(last)),
				firing("SagadPhasePausedTooLong", minute(last)),
				firing("SagadCapsulesStuck", minute(10)),
				firing("SagadHaltRateHigh", minute(10)),
				firing("SagadForgedCompletions", minute(10)),
				firing("SagadCorruptValues", minute(10)),
				firing("SagadCapsulesAwaitingOperator", minute(live+65)),
			}},
			{Interval: "1m", Name: "its scrapes fail", Input: down, ExprTests: []exprTest{firing("SagadDown", minute(live+4))}},
			{Interval: "1m", Name: "no sagad target at all", Input: absent, ExprTests: []exprTest{firing("SagadAbsent", minute(live+8))}},
		},
	}
	dir := t.TempDir()
	rules, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o644))
	b, err := yaml.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "live_test.yml"), b, 0o644))

	// Every alert of the file is among those checked.
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(rules, &file))
	var checked []string
	for _, g := range doc.Tests {
		for _, e := range g.ExprTests {
			checked = append(checked, strings.SplitN(strings.SplitN(e.Expr, `alertname="`, 2)[1], `"`, 2)[0])
		}
	}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			require.Contains(t, checked, r.Alert, "alert %s is not driven by this test", r.Alert)
		}
	}

	cmd := exec.Command(promtool, "test", "rules", "live_test.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Logf("promtool input:\n%s", b)
	}
	require.NoError(t, err, "promtool test rules over the scraped samples:\n%s", out)
}
