package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/store"
)

// Config configures a run of the suite.
type Config struct {
	// Short runs fewer capsules and faults per scenario (the CI version).
	Short bool
	// Scenario runs only the scenario of that name; "" runs them all.
	Scenario string
	// Dir holds binaries, data and logs. Defaults to a new temporary
	// directory, removed after a run that passed.
	Dir string
	// Log receives progress lines. Defaults to discarding.
	Log io.Writer
}

// Result is what one scenario did to capsules and to the executor.
type Result struct {
	Scenario  string
	Published int // acknowledged by JetStream
	Terminal  int // completed, halted or cancelled
	// Lost capsules were acknowledged but have no checkpoint.
	Lost int
	// Refused counts publishes that failed and were retried (no server,
	// no stream leader, a full store).
	Refused int
	// Stuck capsules have a checkpoint but had not ended when the scenario
	// stopped waiting.
	Stuck int
	// Duplicated counts capsules with more than one outcome message.
	Duplicated int
	// Calls is the number of executor calls; Pairs the (capsule, cycle)
	// pairs they were for.
	Calls, Pairs int
	// CrashRepeats are repeated calls with a sagad killed in between;
	// LiveRepeats the others.
	CrashRepeats, LiveRepeats int
	// Recovery is how long after the last fault the last capsule ended.
	Recovery time.Duration
	Duration time.Duration
	// Err is a failure of the scenario itself (a process that would not
	// start), not of sagad.
	Err error
}

// OK reports whether the scenario passed.
func (r Result) OK() bool {
	return r.Err == nil && r.Published > 0 && r.Lost == 0 && r.Duplicated == 0 && r.Stuck == 0 && r.LiveRepeats == 0
}

// size is how much a scenario does.
type size struct {
	capsules int           // to publish
	window   time.Duration // over which they are published and faults happen
	kills    int           // faults of the storm scenarios
	settle   time.Duration // how long to wait for every capsule to end after the window
}

func sizeOf(short bool) size {
	if short {
		return size{capsules: 60, window: 8 * time.Second, kills: 2, settle: 90 * time.Second}
	}
	return size{capsules: 600, window: 60 * time.Second, kills: 6, settle: 3 * time.Minute}
}

// Scenario is one fault schedule on one topology.
type Scenario struct {
	Name string
	Doc  string
	// Nodes is the number of nats-servers (1, or 3 for a cluster).
	Nodes int
	// Sagads is the number of sagad processes.
	Sagads int
	// MaxFileStore is the nats-servers' file storage limit (0: 1 GiB).
	MaxFileStore int64
	// Late is how many nats-servers (the last ones) are not up when the
	// sagads start: Arrive starts them, before any capsule is published.
	Late int
	// Arrive starts the Late nats-servers; nil when Late is 0.
	Arrive func(ctx context.Context, e *env) error
	// Faults runs while capsules are being published, for about sz.window.
	Faults func(ctx context.Context, e *env, sz size) error
}

// Scenarios is the suite, in the order it runs.
var Scenarios = []Scenario{
	{Name: "sagad-kill", Doc: "kill -9 of the only sagad, restarted at once, repeatedly", Nodes: 1, Sagads: 1, Faults: sagadStorm(1)},
	{Name: "two-sagads-kill", Doc: "two sagads, kill -9 of one then the other, then both at once", Nodes: 1, Sagads: 2, Faults: sagadStorm(2)},
	{Name: "nats-kill", Doc: "kill -9 of nats-server, restarted after 2s", Nodes: 1, Sagads: 1, Faults: natsKill},
	{Name: "cluster", Doc: "3 nodes, R3: kill -9 of a node sagad is not connected to and restart, then of the node sagad is connected to", Nodes: 3, Sagads: 1, Faults: clusterKill},
	{Name: "sigterm", Doc: "SIGTERM of sagad under load, restarted once it exited", Nodes: 1, Sagads: 1, Faults: sigterm},
	{Name: "disk-full", Doc: "max_file_store too small for the load; nats-server restarted with room", Nodes: 1, Sagads: 1, MaxFileStore: 64 << 10, Faults: diskFull},
	// A sagad that did not wait exited at once without a server, and after
	// 30 s when the cluster could not hold its streams: the cluster comes
	// later than that.
	{Name: "late-nats", Doc: "sagad started before its nats-server, which comes 6s later", Nodes: 1, Sagads: 1, Late: 1, Arrive: arriveAfter(6 * time.Second), Faults: steady},
	{Name: "forming-cluster", Doc: "3 nodes, R3: sagad started with one node up, the other two come 35s later", Nodes: 3, Sagads: 1, Late: 2, Arrive: arriveAfter(35 * time.Second), Faults: steady},
}

// Run runs the selected scenarios one after the other and returns their
// results. It fails only when the suite itself cannot run (no Go toolchain,
// an unknown scenario).
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	var todo []Scenario
	for _, s := range Scenarios {
		if cfg.Scenario == "" || cfg.Scenario == s.Name {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return nil, fmt.Errorf("chaos: unknown scenario %q", cfg.Scenario)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sagachaos-")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	fmt.Fprintf(cfg.Log, "chaos: building into %s\n", dir)
	bins, err := Build(ctx, filepath.Join(dir, "bin"), cfg.Log)
	if err != nil {
		return nil, err
	}
	// The short suite runs its scenarios side by side: each waits mostly
	// for redeliveries (sagad's 30 s ack wait), not for the CPU, and every
	// scenario has its own processes, ports and directories.
	results := make([]Result, len(todo))
	log := &syncWriter{w: cfg.Log}
	var wg sync.WaitGroup
	for i, s := range todo {
		run := func() {
			fmt.Fprintf(log, "chaos: %s: %s\n", s.Name, s.Doc)
			results[i] = runScenario(ctx, s, bins, filepath.Join(dir, s.Name), sizeOf(cfg.Short), log)
			fmt.Fprintf(log, "chaos: %s\n", results[i])
		}
		if !cfg.Short {
			run()
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
	wg.Wait()
	passed := true
	for _, r := range results {
		passed = passed && r.OK()
	}
	if passed && cfg.Dir == "" {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(cfg.Log, "chaos: logs kept in %s\n", dir)
	}
	return results, nil
}

func (r Result) String() string {
	s := fmt.Sprintf("%-16s published %4d (%3d refused) terminal %4d lost %d stuck %d duplicated %d | calls %4d for %4d (capsule, cycle): repeats after a crash %d, by a live sagad %d | recovery %5.1fs, %5.1fs in all",
		r.Scenario, r.Published, r.Refused, r.Terminal, r.Lost, r.Stuck, r.Duplicated, r.Calls, r.Pairs, r.CrashRepeats, r.LiveRepeats,
		r.Recovery.Seconds(), r.Duration.Seconds())
	if r.Err != nil {
		s += " | error: " + r.Err.Error()
	}
	if r.OK() {
		return s + " | PASS"
	}
	return s + " | FAIL"
}

// syncWriter serialises writes of scenarios running side by side.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// env is one scenario's processes and what happened to them.
type env struct {
	name   string
	dir    string
	log    io.Writer
	nats   []*natsNode
	sagads []*sagadProc

	mu        sync.Mutex
	kills     []time.Time // sagad kill -9s
	lastFault time.Time
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "chaos:   %s: %s\n", e.name, fmt.Sprintf(format, args...))
}

func (e *env) fault() {
	e.mu.Lock()
	e.lastFault = time.Now()
	e.mu.Unlock()
}

// killSagad kills sagad i with -9 and records when.
func (e *env) killSagad(i int) error {
	e.mu.Lock()
	e.kills = append(e.kills, time.Now())
	e.mu.Unlock()
	e.fault()
	e.logf("kill -9 %s", e.sagads[i].name)
	return e.sagads[i].kill9()
}

func (e *env) startSagad(i int) error {
	e.logf("start %s", e.sagads[i].name)
	return e.sagads[i].start()
}

func (e *env) killNATS(i int) error {
	e.fault()
	e.logf("kill -9 %s", e.nats[i].name)
	return e.nats[i].kill9()
}

func (e *env) startNATS(i int) error {
	e.fault()
	e.logf("start %s", e.nats[i].name)
	return e.nats[i].start()
}

func (e *env) stopAll() {
	for _, s := range e.sagads {
		s.stop(25 * time.Second)
	}
	for _, n := range e.nats {
		n.stop(10 * time.Second)
	}
}

// targetBucket holds the key every capsule targets (a kv: target needs no
// file and no shared lock).
const (
	targetBucket = "CHAOS_TARGETS"
	targetKey    = "t"
)

func runScenario(ctx context.Context, s Scenario, bins Binaries, dir string, sz size, log io.Writer) (r Result) {
	start := time.Now()
	r.Scenario = s.Name
	defer func() { r.Duration = time.Since(start) }()
	e, js, nc, err := setupScenario(ctx, s, bins, dir, log)
	if e != nil {
		defer e.stopAll()
	}
	if nc != nil {
		defer nc.Close()
	}
	if err != nil {
		r.Err = err
		return r
	}
	// sagad creates its streams and buckets when it starts.
	var cl *client.Client
	if err := retry(ctx, 60*time.Second, func(ctx context.Context) error {
		cl, err = client.NewClient(ctx, js)
		return err
	}); err != nil {
		r.Err = err
		return r
	}

	var published []string
	var wg sync.WaitGroup
	wg.Add(1)
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	go func() {
		defer wg.Done()
		published, r.Refused = publish(pubCtx, cl, sz)
	}()
	if err := s.Faults(ctx, e, sz); err != nil {
		r.Err = err
	}
	wg.Wait()
	r.Published = len(published)
	e.mu.Lock()
	lastFault := e.lastFault
	e.mu.Unlock()
	if lastFault.IsZero() {
		lastFault = time.Now()
	}

	// Wait for every capsule to have an outcome, or give up.
	deadline := time.Now().Add(sz.settle)
	var last time.Time
	for {
		n, err := outcomeCount(ctx, js)
		if err == nil && n >= uint64(len(published)) {
			last = time.Now()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !last.IsZero() {
		r.Recovery = last.Sub(lastFault)
	}
	check(ctx, cl, js, published, &r)
	e.mu.Lock()
	kills := append([]time.Time(nil), e.kills...)
	e.mu.Unlock()
	if err := countCalls(filepath.Join(dir, "calls.log"), kills, &r); err != nil && r.Err == nil {
		r.Err = err
	}
	return r
}

// setupScenario starts the scenario's nats-servers and sagads and returns a
// JetStream context of the suite's own connection.
func setupScenario(ctx context.Context, s Scenario, bins Binaries, dir string, log io.Writer) (*env, jetstream.JetStream, *nats.Conn, error) {
	workspace := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(workspace, 0o750); err != nil {
		return nil, nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(workspace, "go.mod"), []byte("module chaos\n"), 0o644); err != nil {
		return nil, nil, nil, err
	}
	nodes, err := newNATSNodes(dir, bins.NATSServer, s.Nodes, s.MaxFileStore)
	if err != nil {
		return nil, nil, nil, err
	}
	e := &env{name: s.Name, dir: dir, log: log, nats: nodes}
	var urls []string
	for i := range nodes {
		urls = append(urls, nodes[i].url())
		if i >= len(nodes)-s.Late {
			continue // Arrive starts it
		}
		if err := e.nats[i].start(); err != nil {
			return e, nil, nil, err
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		return e, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return e, nil, nc, err
	}
	startSagads := func() error {
		calls := filepath.Join(dir, "calls.log")
		for i := range s.Sagads {
			// sagad knows the first node; the others it learns from it, as
			// any NATS client does, and reconnects to them when it goes.
			sp, err := newSagad(dir, bins, i, nodes[0].url(), workspace, calls, s.Nodes, 500*time.Millisecond)
			if err != nil {
				return err
			}
			e.sagads = append(e.sagads, sp)
			if err := e.startSagad(i); err != nil {
				return err
			}
		}
		return nil
	}
	replicas := s.Nodes
	if s.Late > 0 {
		// sagad first: it must wait for what is missing, not exit.
		if err := startSagads(); err != nil {
			return e, js, nc, err
		}
		if err := s.Arrive(ctx, e); err != nil {
			return e, js, nc, err
		}
	}
	// The cluster forms and elects a meta leader; until then creating the
	// bucket fails.
	if err := retry(ctx, 60*time.Second, func(ctx context.Context) error {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: targetBucket, Replicas: replicas})
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, targetKey, []byte("chaos target"))
		return err
	}); err != nil {
		return e, js, nc, fmt.Errorf("chaos: target bucket: %w", err)
	}
	if s.Late == 0 {
		if err := startSagads(); err != nil {
			return e, js, nc, err
		}
	}
	return e, js, nc, nil
}

// retry calls f with a 5 s context until it succeeds or total passes.
func retry(ctx context.Context, total time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(total)
	for {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(fctx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// publish publishes sz.capsules capsules spread over sz.window, each
// retried until JetStream acknowledges it (sagad runs a capsule published
// twice once), and returns the ids of the acknowledged ones.
func publish(ctx context.Context, cl *client.Client, sz size) (ids []string, refused int) {
	every := sz.window / time.Duration(sz.capsules)
	next := time.Now()
	for range sz.capsules {
		id, raw, err := newCapsule()
		if err != nil {
			return ids, refused
		}
		for {
			if ctx.Err() != nil {
				return ids, refused
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cl.Publish(pctx, raw, "")
			cancel()
			if err == nil {
				ids = append(ids, id)
				break
			}
			refused++
			time.Sleep(100 * time.Millisecond)
		}
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
	return ids, refused
}

// newCapsule is a sealed capsule run by the chaos executor, with a lock of
// its own so capsules do not wait for each other.
func newCapsule() (string, []byte, error) {
	now := time.Now().UTC().Truncate(time.Second)
	approved := now.Add(-time.Minute)
	id := newID()
	c := capsule.Capsule{
		SchemaVersion:   "1.0",
		CapsuleID:       id,
		CreatedAt:       now,
		Deadline:        now.Add(24 * time.Hour),
		ProducerAgentID: "chaos-producer",
		Task:            capsule.Task{Kind: "chaos", Title: "Chaos capsule", Description: "Survive the chaos."},
		Spec: capsule.Spec{
			Approved: true, ApprovedBy: "human-lead", ApprovedAt: &approved,
			AcceptanceCriteria: []string{"the capsule ends once"},
			ProblemStatement:   "sagad must survive crashes.",
			DefinitionOfDone:   "The reviewer approves.",
		},
		ContextRefs: []string{"file:go.mod"},
		Target:      "kv:" + targetBucket + "/" + targetKey,
		Constraints: capsule.Constraints{
			ResourceLocksRequired: []string{"chaos/" + id},
			AllowedPaths:          []string{"."},
			Network:               capsule.Network{Mode: "none"},
		},
		Budget: capsule.Budget{Tokens: 10000, Dollars: 5},
		Review: capsule.ReviewPolicy{ReviewerAgentID: "stub-reviewer", MaxCycles: 3},
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", nil, err
	}
	sealed, err := capsule.Seal(b)
	return id, sealed, err
}

func newID() string {
	var b [16]byte
	_, _ = randRead(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// outcomeCount is the number of messages in the outcome stream.
func outcomeCount(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, store.OutcomesStream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.Msgs, nil
}

// check fills r's capsule counts from every published capsule's checkpoint
// and the outcome stream.
func check(ctx context.Context, cl *client.Client, js jetstream.JetStream, ids []string, r *Result) {
	per := map[string]int{}
	err := retry(ctx, 30*time.Second, func(ctx context.Context) error {
		clear(per)
		return readOutcomes(ctx, js, per)
	})
	if err != nil && r.Err == nil {
		r.Err = fmt.Errorf("chaos: read outcomes: %w", err)
	}
	for _, n := range per {
		if n > 1 {
			r.Duplicated++
		}
	}
	for _, id := range ids {
		var st client.Status
		err := retry(ctx, 30*time.Second, func(ctx context.Context) error {
			var err error
			st, err = cl.Status(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		})
		switch {
		case err != nil:
			if r.Err == nil {
				r.Err = fmt.Errorf("chaos: status of %s: %w", id, err)
			}
		case st.CapsuleID == "" && st.Key == "":
			r.Lost++
		case st.State == capsule.InProgress || st.State == capsule.Paused:
			r.Stuck++
		default:
			r.Terminal++
		}
	}
}

// readOutcomes counts the outcome messages per capsule.
func readOutcomes(ctx context.Context, js jetstream.JetStream, per map[string]int) error {
	s, err := js.Stream(ctx, store.OutcomesStream)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		per[m.Header.Get(store.HeaderCapsuleID)]++
	}
	return nil
}

// countCalls reads the executor's call log: calls per (capsule, cycle),
// and whether each repeat had a sagad kill between it and the call before.
func countCalls(path string, kills []time.Time, r *Result) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	calls := map[string][]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var id, cycle string
		var at int64
		if _, err := fmt.Sscan(sc.Text(), &id, &cycle, &at); err != nil {
			return fmt.Errorf("chaos: call log line %q: %w", sc.Text(), err)
		}
		calls[id+"/"+cycle] = append(calls[id+"/"+cycle], at)
		r.Calls++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	r.Pairs = len(calls)
	for _, at := range calls {
		sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
		for i := 1; i < len(at); i++ {
			crashed := false
			for _, k := range kills {
				if n := k.UnixNano(); n > at[i-1] && n < at[i] {
					crashed = true
					break
				}
			}
			if crashed {
				r.CrashRepeats++
			} else {
				r.LiveRepeats++
			}
		}
	}
	return nil
}
