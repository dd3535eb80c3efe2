package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/schemas"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55.0 leaks this goroutine now and then from
		// ObjectStore.Put (sagad's artifacts): Put's private JetStream
		// context clears its status channel before the goroutine has read
		// it, and the goroutine blocks forever on a nil channel. The
		// examples' tests ignore it too; BENCHMARKS.md counts it.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

// expectedStates counts the terminal states of capsules 0 … n-1 of mix.
func expectedStates(mix string, n int) map[string]int {
	out := map[string]int{}
	for s := range uint64(n) {
		out[string(classOf(mix, s).Expect().State)]++
	}
	return out
}

// TestSmoke is the CI run of the benchmark: a few hundred capsules through
// both systems, asserting only that every capsule finished exactly once and
// as its class must — nothing about speed.
func TestSmoke(t *testing.T) {
	t.Parallel()
	const n, perClass = 300, 3
	var out bytes.Buffer
	rep, err := Run(context.Background(), Config{
		Capsules:        n,
		Warmup:          -1,
		Window:          50,
		Workers:         4,
		Mix:             MixMixed,
		RoundTripSample: perClass,
		DataDir:         t.TempDir(),
		StallTimeout:    20 * time.Second,
		Floor:           true,
	}, &out)
	require.NoError(t, err)
	t.Log(out.String())

	require.True(t, rep.ExactlyOnce(), "exactly-once check failed:\n%s", out.String())
	for _, s := range []*SystemResult{rep.Baseline, rep.Floor, rep.Sagad} {
		require.NotNil(t, s)
		require.Len(t, s.Rounds, 1)
		require.Equal(t, n, s.Rounds[0].Finished)
		require.Zero(t, s.Delivery.Lost)
		require.Zero(t, s.Delivery.Duplicates)
		require.Zero(t, s.Delivery.Wrong)
		require.Equal(t, uint64(s.Delivery.Published), s.Delivery.StoredOutcomes)
	}
	require.Equal(t, n+perClass, rep.Baseline.Delivery.Published)
	require.Equal(t, n+perClass, rep.Floor.Delivery.Published)
	require.Equal(t, n+4*perClass, rep.Sagad.Delivery.Published)

	// The measured capsules are 0 … n-1; the round-trip ones add perClass
	// of each class: two classes complete, two halt.
	want := expectedStates(MixMixed, n)
	want[string(capsule.Completed)] += 2 * perClass
	want[string(capsule.Halted)] += 2 * perClass
	require.Equal(t, want, rep.Sagad.Delivery.ByState)
	require.Positive(t, rep.Sagad.Delivery.HistoriesChecked)
	require.Empty(t, rep.Sagad.Delivery.Problems)

	// The observer's counts are exact for the deterministic relay: a KV put
	// and a publish per stage, an ack per stage.
	require.Len(t, rep.Trips, 6)
	relay := rep.Trips[0]
	require.Equal(t, "baseline", relay.System)
	// sagad's sweeper (still running) may list its continuations while the
	// relay is observed; count only the relay's own operations.
	relayOps := 0.0
	for op, n := range relay.Ops {
		if !strings.Contains(op, "SAGA_") && !strings.HasPrefix(op, "ack ") {
			relayOps += n
		}
	}
	require.InDelta(t, 2*relayStages, relayOps, 0.001, "%v", relay.Ops)
	require.InDelta(t, relayStages, relay.OneWay, 0.001)
	require.InDelta(t, relayStages, relay.Ops["kv put "+relayKV], 0.001)
	valid := rep.Trips[2]
	require.Equal(t, "sagad", valid.System)
	require.Equal(t, Valid.String(), valid.Class)
	// The floor makes the requests sagad makes for a valid capsule.
	floor := rep.Trips[1]
	require.Equal(t, "floor", floor.System)
	floorReqs := 0.0
	for op, n := range floor.Ops {
		if strings.Contains(op, "FLOOR") || strings.Contains(op, "floor") {
			if !strings.HasPrefix(op, "ack ") {
				floorReqs += n
			}
		}
	}
	// What sagad's maintenance does meanwhile (the sweeper listing
	// continuations: a consumer made and deleted every few seconds) is no
	// request of the capsule's.
	sagadReqs := valid.PerCapsule
	for op, n := range valid.Ops {
		if strings.HasPrefix(op, "api ") && strings.Contains(op, "SAGA_CONTINUATIONS") {
			sagadReqs -= n
		}
	}
	require.InDelta(t, sagadReqs, floorReqs, 0.2, "floor %v\nsagad %v", floor.Ops, valid.Ops)
	// It sends what sagad sends, request by request: payloads and headers
	// within a few bytes (times and counters vary in length). A floor
	// lighter than sagad's requests would make sagad's logic look dearer.
	sagadOp := strings.NewReplacer(floorCP, "SAGA_CHECKPOINTS", floorLocks, "SAGA_LOCKS", floorCapsules, "SAGA_CAPSULES",
		floorArtifacts, "SAGA_ARTIFACT_RECORDS", floorOutSubj, "outcome", "bench.floor.", "saga.phase.")
	for op, fb := range floor.Bytes {
		if strings.HasPrefix(op, "ack ") || strings.HasPrefix(op, "get ") {
			continue
		}
		if strings.HasPrefix(op, "api ") && strings.Contains(op, "SAGA_CONTINUATIONS") {
			// The sweeper's listing, counted in whichever window it fell
			// (seen in the floor's under load): no request of a capsule's.
			continue
		}
		sb, ok := valid.Bytes[sagadOp.Replace(op)]
		require.True(t, ok, "%s: sagad makes no %s\nfloor %v\nsagad %v", op, sagadOp.Replace(op), floor.Bytes, valid.Bytes)
		require.InDelta(t, sb, fb, max(12, 0.02*sb), "%s sends %.0f bytes a capsule, sagad %.0f\nfloor %v\nsagad %v", op, fb, sb, floor.Bytes, valid.Bytes)
	}
	for p := 1; p < capsule.NumPhases; p++ {
		require.InDelta(t, 1, valid.Ops["publish saga.phase."+string(rune('0'+p))], 0.001, "%v", valid.Ops)
	}
	require.InDelta(t, 1, valid.Ops["publish outcome"], 0.001)
	require.InDelta(t, capsule.NumPhases, valid.OneWay, 0.001, "one ack per phase")

	require.Len(t, rep.Targets, 4)
	require.Equal(t, StatusPass, rep.Targets[3].Status)
	require.Contains(t, out.String(), "sagad / baseline")
	require.Contains(t, out.String(), "sagad / floor")

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	require.Contains(t, string(b), `"capsules_per_second"`)
}

// TestMemCheckSmoke runs the memory-flatness mode at toy scale.
// TestClusterSmoke runs the relay and sagad on a 3-node in-process cluster
// with R3 streams: both finish every capsule exactly once.
func TestClusterSmoke(t *testing.T) {
	t.Parallel()
	const n = 60
	var out bytes.Buffer
	rep, err := Run(context.Background(), Config{
		Capsules: n, Warmup: -1, Window: 20, Workers: 4, Cluster: 3,
		RoundTripSample: -1, DataDir: t.TempDir(), StallTimeout: 30 * time.Second,
	}, &out)
	require.NoError(t, err)
	require.True(t, rep.ExactlyOnce(), out.String())
	require.Equal(t, n, rep.Baseline.Rounds[0].Finished)
	require.Equal(t, n, rep.Sagad.Rounds[0].Finished)
	require.Contains(t, out.String(), "cluster: 3 in-process nodes")
}

func TestMemCheckSmoke(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	rep, err := Run(context.Background(), Config{
		MemCheck: true, MemCheckFirst: 40, MemCheckTotal: 80, Window: 20, Workers: 2,
		RoundTripSample: -1, DataDir: t.TempDir(), StallTimeout: 20 * time.Second,
	}, &out)
	require.NoError(t, err)
	require.True(t, rep.ExactlyOnce(), out.String())
	require.Nil(t, rep.Baseline)
	require.NotNil(t, rep.MemCheck)
	require.Equal(t, 40, rep.MemCheck.First.Finished)
	require.Equal(t, 40, rep.MemCheck.Rest.Finished)
	require.Positive(t, rep.MemCheck.AtTotal.HeapInuse)
	require.Equal(t, 80, rep.Sagad.Delivery.Published)
	require.NotEqual(t, StatusNotMeasured, rep.Targets[2].Status)
	require.Contains(t, out.String(), "memory at 40 → 80 capsules")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Mix: "chaos"}, nil)
	require.ErrorContains(t, err, `mix "chaos"`)
	_, err = Run(context.Background(), Config{MemCheck: true, MemCheckFirst: 10, MemCheckTotal: 10}, nil)
	require.ErrorContains(t, err, "must exceed")
	_, err = Run(context.Background(), Config{Profile: "floor"}, nil)
	require.ErrorContains(t, err, "not measured")
	_, err = Run(context.Background(), Config{Profile: "relay"}, nil)
	require.ErrorContains(t, err, `profile "relay"`)
	_, err = Run(context.Background(), Config{MemCheck: true, Floor: true}, nil)
	require.ErrorContains(t, err, "memcheck measures sagad alone")
	_, err = Run(context.Background(), Config{Cluster: -1}, nil)
	require.ErrorContains(t, err, "cluster -1")
}

func TestGeneratorSealedIsValid(t *testing.T) {
	t.Parallel()
	g := NewGenerator(MixMixed)
	now := time.Now()
	cfg := rules.Config{}.WithDefaults()
	seen := map[Class]bool{}
	for seq := range uint64(20) {
		cls := g.Class(seq)
		seen[cls] = true
		raw := g.Sealed(seq, now)
		require.NoError(t, capsule.VerifyIntegrity(raw), "class %s", cls)
		require.NoError(t, schemas.Validate(schemas.Capsule, raw), "class %s", cls)

		// The template gives what sealing the typed capsule gives.
		slow, err := Seal(g.Capsule(seq, now))
		require.NoError(t, err)
		want, err := capsule.Digest(slow)
		require.NoError(t, err)
		got, err := capsule.Digest(raw)
		require.NoError(t, err)
		require.Equal(t, want, got, "class %s", cls)
		canonical, err := capsule.Canonicalize(slow)
		require.NoError(t, err)
		require.Equal(t, string(canonical), string(raw), "class %s", cls)

		var c capsule.Capsule
		require.NoError(t, json.Unmarshal(raw, &c))
		require.Equal(t, g.ID(seq), c.CapsuleID)
		require.Equal(t, []string{"bench/" + g.ID(seq)}, c.Constraints.ResourceLocksRequired)
		res := rules.Evaluate(context.Background(), rules.Input{Capsule: &c, Raw: raw, Config: cfg, Now: now})
		if cls == Unapproved {
			continue
		}
		require.Empty(t, res.Violated, "class %s: %v", cls, res.Findings)
	}
	require.Len(t, seen, int(numClasses))
}

func TestGeneratorIDs(t *testing.T) {
	t.Parallel()
	g, other := NewGenerator(MixValid), NewGenerator(MixValid)
	for _, seq := range []uint64{0, 1, 19, 1 << 40} {
		id := g.ID(seq)
		require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)
		back, ok := g.Seq(id)
		require.True(t, ok)
		require.Equal(t, seq, back)
		_, ok = other.Seq(id)
		require.False(t, ok, "another run's id")
		require.Equal(t, Valid, g.Class(seq))
	}
	_, ok := g.Seq("not-an-id")
	require.False(t, ok)
}

func TestClassOfMix(t *testing.T) {
	t.Parallel()
	counts := map[Class]int{}
	for s := range uint64(2000) {
		counts[classOf(MixMixed, s)]++
	}
	require.Equal(t, map[Class]int{Valid: 1600, Review: 200, ExecFail: 100, Unapproved: 100}, counts)
	require.Equal(t, "spec_not_approved:[approved]", Unapproved.Expect().Halt)
	require.Equal(t, "executor_failed:"+stubFailure, ExecFail.Expect().Halt)
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	require.Equal(t, 50*time.Millisecond, l.P50)
	require.Equal(t, 90*time.Millisecond, l.P90)
	require.Equal(t, 99*time.Millisecond, l.P99)
	require.Equal(t, 100*time.Millisecond, l.Max)
	require.Equal(t, Latency{}, summarize(nil))
	require.Equal(t, 7*time.Millisecond, summarize([]time.Duration{7 * time.Millisecond}).P99)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	msg := func(subj, reply string, hdr ...string) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Reply = reply
		for i := 0; i+1 < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		return m
	}
	tests := []struct {
		m    *nats.Msg
		op   string
		kind opKind
	}{
		{msg("$KV.SAGA_CHECKPOINTS.k", "_INBOX.a.b"), "kv put SAGA_CHECKPOINTS", opRoundTrip},
		{msg("$KV.SAGA_CHECKPOINTS.k", "_INBOX.a.b", jetstream.ExpectedLastSubjSeqHeader, "0"), "kv create SAGA_CHECKPOINTS", opRoundTrip},
		{msg("$KV.SAGA_CHECKPOINTS.k", "_INBOX.a.b", jetstream.ExpectedLastSubjSeqHeader, "12"), "kv update SAGA_CHECKPOINTS", opRoundTrip},
		{msg("$KV.SAGA_LOCKS.k", "_INBOX.a.b", "KV-Operation", "DEL"), "kv delete SAGA_LOCKS", opRoundTrip},
		{msg("$JS.API.DIRECT.GET.KV_SAGA_LOCKS.$KV.SAGA_LOCKS.k", "_INBOX.a.b"), "get SAGA_LOCKS", opRoundTrip},
		{msg("$JS.API.STREAM.INFO.KV_BENCH_TARGETS", "_INBOX.a.b"), "api STREAM.INFO BENCH_TARGETS", opRoundTrip},
		{msg("$JS.API.CONSUMER.MSG.NEXT.SAGA_PHASE_3.phase-3", "_INBOX.a.b"), "pull SAGA_PHASE_3", opPull},
		{msg("$JS.API.CONSUMER.MSG.NEXT.SAGA_OUTCOMES.x", "_INBOX.a.b"), "", opIgnore},
		{msg("$JS.ACK.SAGA_PHASE_3.phase-3.1.2.3.4.5", ""), "ack SAGA_PHASE_3", opOneWay},
		{msg("$JS.ACK.SAGA_OUTCOMES.x.1.2.3.4.5", ""), "", opIgnore},
		{msg("$O.SAGA_ARTIFACTS.C.abc", "_INBOX.a.b"), "object chunk SAGA_ARTIFACTS", opRoundTrip},
		{msg("saga.phase.4", "_INBOX.a.b"), "publish saga.phase.4", opRoundTrip},
		{msg("saga.events.k", "_INBOX.a.b"), "publish event", opRoundTrip},
		{msg("saga.intake", "_INBOX.a.b"), "", opIgnore},
		{msg("saga.phase.4", "$JS.ACK.SAGA_PHASE_4.phase-4.1.1.1.1.0"), "", opIgnore},
		{msg("_INBOX.a.b", ""), "", opIgnore},
	}
	for _, tt := range tests {
		op, kind := classify(tt.m)
		require.Equal(t, tt.op, op, tt.m.Subject)
		if op != "" {
			require.Equal(t, tt.kind, kind, tt.m.Subject)
		}
	}
}

func TestReadMemory(t *testing.T) {
	t.Parallel()
	m := readMemory(true)
	require.Positive(t, m.HeapInuse)
	require.Positive(t, m.Goroutines)
	if rss, _ := procStatus(); rss > 0 {
		require.Positive(t, m.PeakRSS)
		require.Positive(t, m.RSSAfterGC)
	}
	require.Equal(t, uint64(1234<<10), kib([]byte("   1234 kB")))
	require.Zero(t, kib([]byte("")))
	require.True(t, strings.HasPrefix(machine().GoVersion, "go"))
}

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{0.52, 0.41, 0.51, 0.51}, 0.51},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		require.InDelta(t, tt.want, median(tt.in), 1e-9, "%v", tt.in)
	}
}

// TestUnsettled: a first reading before the de-duplication window (or a
// short retention, when longer) has passed is flagged, with the first
// reading that would be steady at the same rate; long or no retention is
// not expected to be flat and is not flagged.
func TestUnsettled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		first, dup time.Duration
		retention  time.Duration
		want       string // "" or a substring
	}{
		{"fast machine, 5s retention", 3 * time.Second, 2 * time.Minute, 5 * time.Second, "-memcheck-first 400000 or more"},
		{"window passed", 3 * time.Minute, 2 * time.Minute, 5 * time.Second, ""},
		{"a retention longer than the window", 5 * time.Minute, 2 * time.Minute, 10 * time.Minute, "the 10m0s retention"},
		{"sagad's default retention", 3 * time.Second, 2 * time.Minute, 168 * time.Hour, ""},
		{"the default, unset", 3 * time.Second, 2 * time.Minute, 0, ""},
		{"kept forever", 3 * time.Second, 2 * time.Minute, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := unsettled(tt.first, tt.dup, tt.retention, 10_000)
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tt.want)
		})
	}
}
