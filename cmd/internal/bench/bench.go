package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/sagad/sagad/pipeline"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/cmd/internal/daemon"
)

// Config configures [Run].
type Config struct {
	// Capsules is how many capsules each system gets per round, warm-up
	// excluded. Defaults to 5000.
	Capsules int `json:"capsules"`
	// Warmup is how many capsules each system gets before its first
	// measured round, not measured. Defaults to Capsules/10, at most 1000;
	// negative for none.
	Warmup int `json:"warmup"`
	// Window is the offered load: the most capsules in flight at once (a
	// new one is published when one finishes). Both systems get the same.
	// Defaults to 200.
	Window int `json:"window"`
	// Rate, when positive, publishes capsules at this many per second (an
	// open loop: the same arrival rate for both systems) instead of one per
	// finished capsule; Window still caps what is in flight.
	Rate float64 `json:"rate,omitempty"`
	// Workers is sagad's workers per phase. Defaults to sagad's default.
	Workers int `json:"workers"`
	// RelayWorkers is the baseline's workers per stage: > 0 a fixed pool
	// like sagad's phase runner, < 0 a goroutine per message, so that every
	// message in flight is in progress at once (the floor: JetStream's
	// limit, not a worker pool's). Defaults to -1.
	RelayWorkers int `json:"relay_workers"`
	// Mix is the capsule mix, [MixValid] or [MixMixed]. Defaults to MixMixed.
	Mix string `json:"mix"`
	// Rounds alternates the systems (baseline, floor, sagad) this many
	// times, in reverse order every other round (a system measured later
	// in a round finds a busier server); figures are those of the median
	// round. Defaults to 1.
	Rounds int `json:"rounds"`
	// Floor adds a third system: the saga floor, which makes sagad's
	// JetStream requests for a valid capsule (the same kinds, sizes and
	// order) with none of its logic. It tells what sagad's storage costs
	// apart from what its logic costs.
	Floor bool `json:"floor,omitempty"`
	// SkipBaseline measures sagad alone.
	SkipBaseline bool `json:"skip_baseline,omitempty"`
	// MemCheck runs sagad alone for MemCheckFirst capsules, reads memory,
	// continues to MemCheckTotal and reads it again.
	MemCheck bool `json:"memcheck,omitempty"`
	// MemCheckFirst defaults to 10 000.
	MemCheckFirst int `json:"memcheck_first,omitempty"`
	// MemCheckTotal defaults to 100 000.
	MemCheckTotal int `json:"memcheck_total,omitempty"`
	// RoundTripSample is how many capsules per class the round-trip
	// measurement drives one at a time. Defaults to 50; negative skips it.
	RoundTripSample int `json:"round_trip_sample"`
	// DataDir holds the server's file storage and sagad's workspace.
	// Defaults to a temporary directory, removed afterwards.
	DataDir string `json:"data_dir"`
	// Sync is the server's fsync policy, as sagad's --sync: "always",
	// "default" (the server's 2 minutes) or a duration. Defaults to
	// "default", the setting of every earlier figure in BENCHMARKS.md
	// (sagad's own default is 1s).
	Sync string `json:"sync"`
	// Cluster, when above 1, runs every system on an in-process JetStream
	// cluster of that many nodes (routes on loopback) with every stream and
	// bucket replicated on all of them (R = Cluster); every system connects
	// to the first node. Defaults to 0: one server, R1.
	Cluster int `json:"cluster,omitempty"`
	// DuplicateWindow and PhaseTimeout, when set, override sagad's
	// pipeline defaults (10m each), for experiments: both bound memory the
	// server or the client holds per recent capsule (see BENCHMARKS.md).
	DuplicateWindow time.Duration `json:"duplicate_window_ns,omitempty"`
	PhaseTimeout    time.Duration `json:"phase_timeout_ns,omitempty"`
	// Retention is sagad's retention of ended capsules. Defaults to sagad's
	// own default (daemon.DefaultRetention, 7 days); negative keeps them
	// forever. A capsule forgotten before the check reads its checkpoint
	// is counted as forgotten, not as a problem.
	Retention time.Duration `json:"retention_ns"`
	// StallTimeout is how long a run waits without any outcome before it
	// gives up on the capsules still in flight. Defaults to 60s.
	StallTimeout time.Duration `json:"stall_timeout_ns"`
	// CPUProfile, when set, receives a CPU profile of the Profile system's
	// first measured round (the whole process: that system, client and
	// server). With MemCheck (sagad) it covers the capsules after the first
	// reading, and CPUProfile+".first" the ones before it.
	CPUProfile string `json:"cpu_profile,omitempty"`
	// MemProfile, when set, receives a heap profile taken after the Profile
	// system's last measured round, and MemProfile+".base" one taken just
	// before its first: `go tool pprof -sample_index=alloc_space -base X.base
	// X` shows what was allocated in between (with several rounds, the other
	// systems' rounds in between too).
	MemProfile string `json:"mem_profile,omitempty"`
	// Profile names the system CPUProfile and MemProfile cover: "sagad"
	// (the default), "floor" or "baseline".
	Profile string `json:"profile,omitempty"`
}

func (c Config) withDefaults() Config {
	if c.Capsules <= 0 {
		c.Capsules = 5000
	}
	if c.Warmup == 0 {
		c.Warmup = min(c.Capsules/10, 1000)
	}
	if c.Warmup < 0 || c.MemCheck {
		c.Warmup = 0
	}
	if c.Window <= 0 {
		c.Window = 200
	}
	if c.Workers <= 0 {
		c.Workers = pipeline.DefaultWorkers
	}
	if c.RelayWorkers == 0 {
		c.RelayWorkers = -1
	}
	if c.Mix == "" {
		c.Mix = MixMixed
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.Profile == "" {
		c.Profile = "sagad"
	}
	if c.Sync == "" {
		c.Sync = daemon.SyncServerDefault
	}
	if c.MemCheckFirst <= 0 {
		c.MemCheckFirst = 10_000
	}
	if c.MemCheckTotal <= 0 {
		c.MemCheckTotal = 100_000
	}
	if c.RoundTripSample == 0 {
		c.RoundTripSample = 50
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 60 * time.Second
	}
	return c
}

// replicas is the replica count of every stream and bucket.
func (c Config) replicas() int { return max(c.Cluster, 1) }

func (c Config) validate() error {
	var errs []error
	if c.Cluster < 0 {
		errs = append(errs, fmt.Errorf("cluster %d: want 0 (one server) or a node count", c.Cluster))
	}
	if c.Mix != MixValid && c.Mix != MixMixed {
		errs = append(errs, fmt.Errorf("mix %q: want %q or %q", c.Mix, MixValid, MixMixed))
	}
	switch {
	case !slices.Contains([]string{"sagad", "floor", "baseline"}, c.Profile):
		errs = append(errs, fmt.Errorf("profile %q: want sagad, floor or baseline", c.Profile))
	case c.Profile == "floor" && !c.Floor, c.Profile == "baseline" && c.SkipBaseline:
		errs = append(errs, fmt.Errorf("profile %q: that system is not measured", c.Profile))
	case c.MemCheck && (c.Profile != "sagad" || c.Floor):
		errs = append(errs, errors.New("memcheck measures sagad alone: no -floor, no -profile"))
	}
	if c.MemCheck && c.MemCheckTotal <= c.MemCheckFirst {
		errs = append(errs, fmt.Errorf("memcheck total %d must exceed the first reading at %d", c.MemCheckTotal, c.MemCheckFirst))
	}
	return errors.Join(errs...)
}

// Report is everything one run measured.
type Report struct {
	Machine  Machine       `json:"machine"`
	Settings Config        `json:"settings"`
	Baseline *SystemResult `json:"baseline,omitempty"`
	// Floor is the saga floor (Config.Floor).
	Floor    *SystemResult `json:"floor,omitempty"`
	Sagad    *SystemResult `json:"sagad"`
	Ratio    *Ratio        `json:"ratio,omitempty"`
	MemCheck *MemCheck     `json:"memcheck,omitempty"`
	Trips    []RoundTrips  `json:"round_trips,omitempty"`
	Targets  []Target      `json:"targets"`
	Logs     SagadLogs     `json:"sagad_logs"`
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// Machine describes where the run happened.
type Machine struct {
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	GoVersion   string `json:"go_version"`
	NATSServer  string `json:"nats_server"`
	// Revision is the VCS revision the binary was built from, when the
	// build recorded it ("+dirty" with local changes).
	Revision string `json:"revision,omitempty"`
}

// SystemResult is one system's figures.
type SystemResult struct {
	// Rounds are the measured batches, one per round.
	Rounds []Batch `json:"rounds"`
	// Median is the round with the median throughput.
	Median Batch `json:"median"`
	// Memory is read right after the system's last round.
	Memory Memory `json:"memory"`
	// APIPerCapsule is JetStream API requests per capsule, as the server's
	// account statistics count them, over the measured rounds.
	APIPerCapsule float64 `json:"jetstream_api_per_capsule"`
	// Delivery is the exactly-once account over every capsule of the run.
	Delivery Delivery `json:"delivery"`
	// Redelivered counts sagad's redelivered phase messages by phase.
	Redelivered map[string]float64 `json:"redelivered,omitempty"`
}

// Ratio compares sagad with the baseline at the same offered load.
type Ratio struct {
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
}

// MemCheck is the memory-flatness measurement.
type MemCheck struct {
	FirstCapsules int     `json:"first_capsules"`
	TotalCapsules int     `json:"total_capsules"`
	First         Batch   `json:"first"`
	Rest          Batch   `json:"rest"`
	AtFirst       Memory  `json:"at_first"`
	AtTotal       Memory  `json:"at_total"`
	RSSRatio      float64 `json:"rss_ratio"`
	RSSAfterGC    float64 `json:"rss_after_gc_ratio"`
	HeapRatio     float64 `json:"heap_ratio"`
	// Unsettled, when not empty, says why the first reading came before
	// memory could be steady (see unsettled).
	Unsettled string `json:"unsettled,omitempty"`
}

// unsettled says why a first reading taken after first of running cannot be
// steady, or "" when it can be. What the server keeps for a window (the
// de-duplication ids of dupWindow, the ended capsules of a retention)
// grows until that window has passed: a reading before it is a half-filled
// server, and the ratio to a later one measures the filling as well. On a
// fast machine 10 000 capsules take seconds. A retention of an hour or more
// (sagad's default, or none) is not expected to be flat at all.
func unsettled(first, dupWindow, retention time.Duration, capsules int) string {
	window, what := dupWindow, fmt.Sprintf("the %s de-duplication window", dupWindow)
	if retention > 0 && retention < time.Hour && retention > window {
		window, what = retention, fmt.Sprintf("the %s retention", retention)
	}
	if retention <= 0 || retention >= time.Hour || first >= window || first <= 0 {
		return ""
	}
	need := int(float64(capsules) * float64(window) / float64(first))
	return fmt.Sprintf("the first reading came %s in, before %s had passed: the ratio includes its filling (-memcheck-first %d or more reads at steady state)",
		first.Round(time.Second), what, need)
}

// Target is one goal of issue 6 and whether this run met it.
type Target struct {
	Name   string `json:"name"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	Status string `json:"status"` // PASS, MISS or "not measured"
}

// SagadLogs summarises what sagad logged during the run.
type SagadLogs struct {
	Lines    int      `json:"lines"`
	Warnings int      `json:"warnings"`
	First    []string `json:"first_warnings,omitempty"`
}

// ExactlyOnce reports whether every capsule of every system finished
// exactly once, as its class must.
func (r *Report) ExactlyOnce() bool {
	for _, s := range []*SystemResult{r.Baseline, r.Floor, r.Sagad} {
		if s != nil && !s.Delivery.OK() {
			return false
		}
	}
	return true
}

// env is one run's server, connections and systems.
type env struct {
	cfg     Config
	srv     *server.Server
	url     string
	driver  jetstream.JetStream
	cleanup []func()
}

func (e *env) close() {
	for _, f := range slices.Backward(e.cleanup) {
		f()
	}
}

func (e *env) connect(name string) (jetstream.JetStream, error) {
	nc, err := nats.Connect(e.url, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	e.cleanup = append(e.cleanup, nc.Close)
	return jetstream.New(nc)
}

// startEnv starts the embedded server with file storage, the way sagad's
// embedded mode does, on a random loopback port.
func startEnv(cfg Config) (*env, error) {
	e := &env{cfg: cfg}
	dir := cfg.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "sagabench-")
		if err != nil {
			return nil, err
		}
		dir = tmp
		e.cleanup = append(e.cleanup, func() { _ = os.RemoveAll(tmp) })
	}
	e.cfg.DataDir = dir
	store := filepath.Join(dir, "nats")
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o750); err != nil {
		e.close()
		return nil, err
	}
	nodes, err := startServers(cfg, store)
	for _, srv := range nodes {
		e.cleanup = append(e.cleanup, func() { srv.Shutdown(); srv.WaitForShutdown() })
	}
	if err != nil {
		e.close()
		return nil, err
	}
	// Every system connects to the first node; the stream state the
	// driver reads from it is that node's replica's.
	e.srv, e.url = nodes[0], nodes[0].ClientURL()
	e.driver, err = e.connect("sagabench-driver")
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// apiTotal is the account's JetStream API request count so far.
func (e *env) apiTotal(ctx context.Context) uint64 {
	info, err := e.driver.AccountInfo(ctx)
	if err != nil {
		return 0
	}
	return info.API.Total
}

// sequence hands out a system's capsule sequence numbers.
type sequence struct{ next uint64 }

func (s *sequence) take() uint64 { n := s.next; s.next++; return n }

// span returns a seq function for the next n numbers.
func (s *sequence) span(n int) func(int) uint64 {
	from := s.next
	s.next += uint64(n)
	return func(i int) uint64 { return from + uint64(i) }
}

// contestant connects a system under test as name, builds and starts it
// with build (which returns the system, how to stop it, and the start's
// error), and starts watching its outcomes.
func (e *env) contestant(ctx context.Context, name string, build func(jetstream.JetStream) (*system, func(), error)) (*contestant, error) {
	js, err := e.connect(name)
	if err != nil {
		return nil, err
	}
	sys, stop, err := build(js)
	if stop != nil {
		e.cleanup = append(e.cleanup, stop)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	c := &contestant{t: newTracker(sys, NewGenerator(e.cfg.Mix)), result: &SystemResult{}}
	if c.stop, err = c.t.watch(ctx, e.driver); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.cleanup = append(e.cleanup, c.stop)
	return c, nil
}

// contestant is one system under test with its tracker.
type contestant struct {
	t      *tracker
	seq    sequence
	stop   func()
	result *SystemResult
}

// Run measures the baseline relay and sagad on one embedded server, as cfg
// says, prints a human-readable report to out (nil for none) and returns it.
// A lost, duplicated or wrong capsule does not make Run fail: the report
// says so ([Report.ExactlyOnce]). Run fails when it cannot measure at all.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	began := time.Now()
	e, err := startEnv(cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer e.close()
	rep := &Report{Machine: machine(), Settings: e.cfg}
	progress := func(format string, args ...any) {
		if out != nil {
			fmt.Fprintf(out, "# "+format+"\n", args...)
		}
	}

	// The relays use sagad's de-duplication window (pipeline's default).
	const ackWait, dupWindow = 30 * time.Second, 2 * time.Minute
	var base, fl *contestant
	if !cfg.SkipBaseline && !cfg.MemCheck {
		if base, err = e.contestant(ctx, "sagabench-relay", func(js jetstream.JetStream) (*system, func(), error) {
			r, err := newRelay(ctx, js, cfg.RelayWorkers, cfg.replicas(), ackWait, dupWindow)
			if err != nil {
				return nil, nil, err
			}
			return r.system(e.srv), r.stop, r.start(ctx)
		}); err != nil {
			return nil, err
		}
	}
	if cfg.Floor && !cfg.MemCheck {
		if fl, err = e.contestant(ctx, "sagabench-floor", func(js jetstream.JetStream) (*system, func(), error) {
			f, err := newFloor(ctx, js, cfg.RelayWorkers, cfg.replicas(), ackWait, dupWindow)
			if err != nil {
				return nil, nil, err
			}
			return f.system(e.srv), f.stop, f.start(ctx)
		}); err != nil {
			return nil, err
		}
	}

	var sg *sagad
	sut, err := e.contestant(ctx, "sagad", func(js jetstream.JetStream) (*system, func(), error) {
		var err error
		if sg, err = newSagad(ctx, js, e.cfg, filepath.Join(e.cfg.DataDir, "workspace")); err != nil {
			return nil, nil, fmt.Errorf("sagad: %w", err)
		}
		if err := sg.start(ctx); err != nil {
			return nil, nil, fmt.Errorf("sagad: %w", err)
		}
		return sg.system(e.srv), sg.stop, nil
	})
	if err != nil {
		return nil, err
	}

	if cfg.MemCheck {
		rep.MemCheck, err = memCheck(ctx, e, sut, progress)
		if err != nil {
			return nil, err
		}
	} else {
		if err := rounds(ctx, e, []*contestant{base, fl, sut}, progress); err != nil {
			return nil, err
		}
	}

	if cfg.RoundTripSample > 0 {
		progress("round trips: %d capsules per class, one at a time", cfg.RoundTripSample)
		if base != nil {
			trips, err := measureRoundTrips(ctx, e.url, base.t, []Class{Valid}, cfg.RoundTripSample, base.seq.take, cfg.StallTimeout)
			if err != nil {
				return nil, fmt.Errorf("bench: baseline round trips: %w", err)
			}
			rep.Trips = append(rep.Trips, trips...)
		}
		if fl != nil {
			trips, err := measureRoundTrips(ctx, e.url, fl.t, []Class{Valid}, cfg.RoundTripSample, fl.seq.take, cfg.StallTimeout)
			if err != nil {
				return nil, fmt.Errorf("bench: floor round trips: %w", err)
			}
			rep.Trips = append(rep.Trips, trips...)
		}
		classes := []Class{Valid}
		if cfg.Mix == MixMixed {
			classes = []Class{Valid, Review, ExecFail, Unapproved}
		}
		trips, err := measureRoundTrips(ctx, e.url, sut.t, classes, cfg.RoundTripSample, sut.seq.take, cfg.StallTimeout)
		if err != nil {
			return nil, fmt.Errorf("bench: sagad round trips: %w", err)
		}
		rep.Trips = append(rep.Trips, trips...)
	}

	progress("settling and checking exactly-once delivery")
	settleCtx, cancel := context.WithTimeout(ctx, cfg.StallTimeout)
	defer cancel()
	if base != nil {
		base.result.Delivery = base.t.settle(settleCtx, e.srv)
		rep.Baseline = base.result
	}
	if fl != nil {
		fl.result.Delivery = fl.t.settle(settleCtx, e.srv)
		rep.Floor = fl.result
	}
	sut.result.Delivery = sut.t.settle(settleCtx, e.srv)
	sample := sut.t.published(historySample)
	problems, forgotten := sg.checkHistories(settleCtx, sut.t.gen, sample)
	sut.result.Delivery.HistoriesChecked = len(sample) - forgotten
	sut.result.Delivery.HistoriesForgotten = forgotten
	sut.result.Delivery.Problems = append(sut.result.Delivery.Problems, problems...)
	sut.result.Redelivered, _ = sg.counters()
	rep.Sagad = sut.result
	lines, warnings, first := sg.logs.snapshot()
	rep.Logs = SagadLogs{Lines: lines, Warnings: warnings, First: first}

	if rep.Baseline != nil && len(rep.Sagad.Rounds) > 0 {
		b, s := rep.Baseline.Median, rep.Sagad.Median
		rep.Ratio = &Ratio{
			Throughput: ratio(s.PerSecond, b.PerSecond),
			P50:        ratio(float64(s.Latency.P50), float64(b.Latency.P50)),
			P99:        ratio(float64(s.Latency.P99), float64(b.Latency.P99)),
		}
	}
	rep.Targets = targets(rep)
	rep.Elapsed = time.Since(began)
	if out != nil {
		WriteText(out, rep)
	}
	return rep, nil
}

// rounds alternates the systems' measured batches, in reverse order every
// other round.
func rounds(ctx context.Context, e *env, systems []*contestant, progress func(string, ...any)) error {
	cfg := e.cfg
	for round := range cfg.Rounds {
		// Every system's round leaves state behind (keys the server indexes,
		// a bigger heap for the process's GC), so a system measured later
		// in a round is measured on a busier server: odd rounds run the
		// systems in the reverse order, so that no system is always last.
		order := slices.Clone(systems)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			if c == nil {
				continue
			}
			name := c.t.sys.name
			if round == 0 && cfg.Warmup > 0 {
				progress("%s: warm-up, %d capsules", name, cfg.Warmup)
				if _, err := c.t.drive(ctx, cfg.Warmup, cfg.Window, cfg.Rate, c.seq.span(cfg.Warmup), cfg.StallTimeout); err != nil {
					return err
				}
			}
			if err := c.t.sys.quiesce(ctx); err != nil {
				return fmt.Errorf("bench: %s before round %d: %w", name, round+1, err)
			}
			progress("%s: round %d, %d capsules, window %d", name, round+1, cfg.Capsules, cfg.Window)
			profiled := c.t.sys.name == cfg.Profile
			stopProfile, err := startProfiles(cfg, profiled && round == 0)
			if err != nil {
				return err
			}
			api := e.apiTotal(ctx)
			b, err := c.t.drive(ctx, cfg.Capsules, cfg.Window, cfg.Rate, c.seq.span(cfg.Capsules), cfg.StallTimeout)
			api = e.apiTotal(ctx) - api
			if perr := stopProfile(profiled && round == cfg.Rounds-1); perr != nil && err == nil {
				err = perr
			}
			if err != nil {
				return err
			}
			c.result.Rounds = append(c.result.Rounds, b)
			c.result.APIPerCapsule = float64(api) / float64(max(b.Capsules, 1))
			if err := c.t.sys.quiesce(ctx); err != nil {
				return fmt.Errorf("bench: %s after round %d: %w", name, round+1, err)
			}
			c.result.Memory = readMemory(false)
			progress("%s: %.0f capsules/s, p50 %s, p99 %s", name, b.PerSecond, ms(b.Latency.P50), ms(b.Latency.P99))
		}
	}
	for _, c := range systems {
		if c != nil {
			c.result.Median = medianRound(c.result.Rounds, cfg.Rate > 0)
		}
	}
	return nil
}

// startProfiles starts the CPU profile and writes the base heap profile
// when on; the returned function stops the CPU profile and, when last,
// writes the heap profile.
func startProfiles(cfg Config, on bool) (func(last bool) error, error) {
	cpu := on && cfg.CPUProfile != ""
	var f *os.File
	if cpu {
		var err error
		if f, err = os.Create(cfg.CPUProfile); err != nil {
			return nil, fmt.Errorf("bench: cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("bench: cpu profile: %w", err)
		}
	}
	if on && cfg.MemProfile != "" {
		if err := writeHeap(cfg.MemProfile + ".base"); err != nil {
			return nil, err
		}
	}
	return func(last bool) error {
		if cpu {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				return fmt.Errorf("bench: cpu profile: %w", err)
			}
		}
		if last && cfg.MemProfile != "" {
			return writeHeap(cfg.MemProfile)
		}
		return nil
	}, nil
}

func writeHeap(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	return f.Close()
}

// memCheck drives sagad to MemCheckFirst capsules, reads memory, goes on to
// MemCheckTotal and reads it again.
func memCheck(ctx context.Context, e *env, sut *contestant, progress func(string, ...any)) (*MemCheck, error) {
	cfg := e.cfg
	mc := &MemCheck{FirstCapsules: cfg.MemCheckFirst, TotalCapsules: cfg.MemCheckTotal}
	progress("memcheck: sagad, first %d capsules", cfg.MemCheckFirst)
	first := cfg
	if cfg.CPUProfile != "" {
		first.CPUProfile = cfg.CPUProfile + ".first"
	}
	stopProfile, err := startProfiles(first, true)
	if err != nil {
		return nil, err
	}
	mc.First, err = sut.t.drive(ctx, cfg.MemCheckFirst, cfg.Window, cfg.Rate, sut.seq.span(cfg.MemCheckFirst), cfg.StallTimeout)
	if perr := stopProfile(false); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return nil, err
	}
	if err := sut.t.sys.quiesce(ctx); err != nil {
		return nil, fmt.Errorf("bench: memcheck: %w", err)
	}
	mc.AtFirst = readMemory(true)
	if cfg.MemProfile != "" {
		if err := writeHeap(cfg.MemProfile + ".first"); err != nil {
			return nil, err
		}
	}
	progress("memcheck: RSS %s (%s after GC) at %d; going on to %d", mib(mc.AtFirst.RSS), mib(mc.AtFirst.RSSAfterGC), cfg.MemCheckFirst, cfg.MemCheckTotal)
	rest := cfg.MemCheckTotal - cfg.MemCheckFirst
	later := cfg
	later.MemProfile = ""
	if stopProfile, err = startProfiles(later, true); err != nil {
		return nil, err
	}
	mc.Rest, err = sut.t.drive(ctx, rest, cfg.Window, cfg.Rate, sut.seq.span(rest), cfg.StallTimeout)
	if perr := stopProfile(false); perr == nil && cfg.MemProfile != "" {
		perr = writeHeap(cfg.MemProfile)
		if perr != nil && err == nil {
			err = perr
		}
	} else if perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return nil, err
	}
	if err := sut.t.sys.quiesce(ctx); err != nil {
		return nil, fmt.Errorf("bench: memcheck: %w", err)
	}
	mc.AtTotal = readMemory(true)
	mc.RSSRatio = ratio(float64(mc.AtTotal.RSS), float64(mc.AtFirst.RSS))
	mc.RSSAfterGC = ratio(float64(mc.AtTotal.RSSAfterGC), float64(mc.AtFirst.RSSAfterGC))
	mc.HeapRatio = ratio(float64(mc.AtTotal.HeapInuse), float64(mc.AtFirst.HeapInuse))
	dupWindow := cfg.DuplicateWindow
	if dupWindow <= 0 {
		dupWindow = 2 * time.Minute // pipeline.Config's default
	}
	mc.Unsettled = unsettled(mc.First.Elapsed, dupWindow, cfg.Retention, cfg.MemCheckFirst)
	sut.result.Rounds = []Batch{mc.First, mc.Rest}
	sut.result.Median = mc.Rest
	sut.result.Memory = mc.AtTotal
	return mc, nil
}

// historySample is how many sagad checkpoints the exactly-once check reads.
const historySample = 40

// medianRound returns the round with the median throughput (with byP99,
// the median p99).
func medianRound(bs []Batch, byP99 bool) Batch {
	if len(bs) == 0 {
		return Batch{}
	}
	key := func(b Batch) float64 { return b.PerSecond }
	if byP99 {
		// At a fixed rate every round has the same throughput: the
		// median is the round with the median p99.
		key = func(b Batch) float64 { return float64(b.Latency.P99) }
	}
	sorted := slices.Clone(bs)
	slices.SortFunc(sorted, func(a, b Batch) int {
		switch {
		case key(a) < key(b):
			return -1
		case key(a) > key(b):
			return 1
		}
		return 0
	})
	return sorted[len(sorted)/2]
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// machine describes this machine.
func machine() Machine {
	m := Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), NATSServer: server.VERSION}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			m.Revision = rev[:min(len(rev), 12)] + dirty
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.MemoryBytes = kib([]byte(v))
				break
			}
		}
	}
	return m
}
