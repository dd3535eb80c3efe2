package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagad/sagad/capsule"
)

// Names tells the collector where sagad's topology lives. The pipeline owns
// these names; the caller passes them in (package pipeline imports this one,
// so this one cannot import it).
type Names struct {
	// PhaseStream is the stream that feeds a phase. Required.
	PhaseStream func(capsule.Phase) string
	// ConsumerName is the durable consumer of a phase. Required.
	ConsumerName func(capsule.Phase) string
	// ContinuationsBucket is the KV bucket of continuations (one entry per
	// paused capsule, a capsule.Continuation). Empty: paused capsules are
	// not counted.
	ContinuationsBucket string
	// CompositionsBucket is the KV bucket of composition records (one
	// entry per composition run). Empty: compositions are not counted.
	CompositionsBucket string
}

// CompositionStates are the states sagad_compositions reports, always,
// so a state none is in reads 0 rather than disappearing.
var CompositionStates = []string{"running", "paused", "completed", "failed", "partial", "cancelled"}

// CollectorConfig configures a [JetStreamCollector].
type CollectorConfig struct {
	// Names of the streams, consumers and bucket to read. PhaseStream and
	// ConsumerName are required.
	Names Names
	// Timeout bounds the JetStream reads of one scrape. Defaults to 2s.
	Timeout time.Duration
	// Logger receives a line per failed read. Defaults to discarding.
	Logger *slog.Logger
	// AwaitingOperator returns the capsules waiting for an operator
	// decision, and whether they have been counted (see
	// [Metrics.AwaitingOperatorCount]): the operator gate keeps no
	// continuation, so the continuations bucket cannot say. Not counted
	// (yet): the operator_gate series is left out rather than read 0. Nil:
	// it reads the continuations like the others.
	AwaitingOperator func() (n int, ok bool)
	// Now is the clock sagad_phase_paused_seconds counts by. Defaults to
	// time.Now.
	Now func() time.Time
	// CompositionState reads a composition record's state from its bytes
	// (the record's format is the store's, which this package cannot
	// import). A state not in [CompositionStates], or ok false, counts as
	// "other". Required for CompositionsBucket to be read.
	CompositionState func(record []byte) (state string, ok bool)
}

func (c CollectorConfig) withDefaults() CollectorConfig {
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c CollectorConfig) validate() error {
	if c.Names.PhaseStream == nil || c.Names.ConsumerName == nil {
		return errors.New("metrics: collector needs Names.PhaseStream and Names.ConsumerName")
	}
	return nil
}

// JetStreamCollector reads the phase consumers and the continuations bucket
// when Prometheus scrapes (the sagad_consumer_*, sagad_phase_paused and
// sagad_capsules_* gauges of the package doc). It keeps no state between
// scrapes except its error counter, and is safe for concurrent scrapes.
type JetStreamCollector struct {
	js  jetstream.JetStream
	cfg CollectorConfig

	pending      *prometheus.Desc
	ackPending   *prometheus.Desc
	redelivered  *prometheus.Desc
	phasePaused  *prometheus.Desc
	pausedFor    *prometheus.Desc
	inPhase      *prometheus.Desc
	paused       *prometheus.Desc
	compositions *prometheus.Desc
	scrapeErrors prometheus.Counter
}

// NewJetStreamCollector returns a collector reading js; register it on the
// same registry as [New]'s metrics.
func NewJetStreamCollector(js jetstream.JetStream, cfg CollectorConfig) (*JetStreamCollector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	phase := []string{"phase"}
	return &JetStreamCollector{
		js:  js,
		cfg: cfg,
		pending: prometheus.NewDesc("sagad_consumer_pending_messages",
			"Messages of the phase's stream not yet delivered to its consumer.", phase, nil),
		ackPending: prometheus.NewDesc("sagad_consumer_ack_pending_messages",
			"Messages delivered to the phase's consumer and not yet acknowledged.", phase, nil),
		redelivered: prometheus.NewDesc("sagad_consumer_redelivered_messages",
			"Unacknowledged messages of the phase's consumer delivered more than once.", phase, nil),
		phasePaused: prometheus.NewDesc("sagad_phase_paused",
			"1 while the phase's consumer is paused (sagactl phase pause), else 0.", phase, nil),
		pausedFor: prometheus.NewDesc("sagad_phase_paused_seconds",
			"How long the phase's consumer has been paused (sagactl phase pause), from the pause's record; 0 while it is not paused.", phase, nil),
		inPhase: prometheus.NewDesc("sagad_capsules_in_phase",
			"Capsules queued for or being worked on by the phase: its consumer's pending plus ack-pending messages.", phase, nil),
		paused: prometheus.NewDesc("sagad_capsules_paused",
			"Paused and waiting capsules, by trigger: continuations, and capsules waiting for an operator decision (operator_gate).", []string{"trigger"}, nil),
		compositions: prometheus.NewDesc("sagad_compositions",
			"Composition runs recorded, by state (running, paused, completed, failed, partial, cancelled, other).", []string{"state"}, nil),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sagad_jetstream_scrape_errors_total",
			Help: "JetStream reads that failed during a scrape; their series were left out of that scrape.",
		}),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *JetStreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ackPending, c.redelivered, c.phasePaused, c.pausedFor, c.inPhase, c.paused, c.compositions} {
		ch <- d
	}
	c.scrapeErrors.Describe(ch)
}

// Collect implements prometheus.Collector. A failed read skips its series
// and counts a scrape error; it never fails the scrape.
func (c *JetStreamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		c.collectPhase(ctx, ch, p)
	}
	c.collectPaused(ctx, ch)
	c.collectCompositions(ctx, ch)
	c.scrapeErrors.Collect(ch)
}

func (c *JetStreamCollector) collectPhase(ctx context.Context, ch chan<- prometheus.Metric, p capsule.Phase) {
	stream, name := c.cfg.Names.PhaseStream(p), c.cfg.Names.ConsumerName(p)
	cons, err := c.js.Consumer(ctx, stream, name)
	if err != nil {
		c.fail("consumer info", err, "stream", stream, "consumer", name)
		return
	}
	info := cons.CachedInfo()
	label := PhaseLabel(p)
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	gauge(c.pending, float64(info.NumPending))
	gauge(c.ackPending, float64(info.NumAckPending))
	gauge(c.redelivered, float64(info.NumRedelivered))
	gauge(c.inPhase, float64(info.NumPending)+float64(info.NumAckPending))
	paused, pausedFor := 0.0, 0.0
	if info.Paused {
		paused = 1
		now := c.cfg.Now()
		// A pause sagad cannot date (another tool's, short) reads 0
		// seconds: it is reported by sagad_phase_paused alone.
		if at := capsule.PhasePausedAt(info.Config.Metadata, info.Config.PauseUntil, now); !at.IsZero() {
			pausedFor = max(now.Sub(at).Seconds(), 0)
		}
	}
	gauge(c.phasePaused, paused)
	gauge(c.pausedFor, pausedFor)
}

func (c *JetStreamCollector) collectPaused(ctx context.Context, ch chan<- prometheus.Metric) {
	bucket := c.cfg.Names.ContinuationsBucket
	if bucket == "" {
		return
	}
	counts, err := c.countContinuations(ctx, bucket)
	if err != nil {
		c.fail("continuations", err, "bucket", bucket)
		return
	}
	gateKnown := true
	if f := c.cfg.AwaitingOperator; f != nil {
		var n int
		n, gateKnown = f()
		counts[TriggerLabel(capsule.TriggerOperatorGate)] = n
	}
	for _, t := range Triggers {
		label := TriggerLabel(t)
		if t == capsule.TriggerOperatorGate && !gateKnown {
			continue // not counted (yet): no series rather than a false 0
		}
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, float64(counts[label]), label)
	}
	if n := counts[Other]; n > 0 {
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, float64(n), Other)
	}
}

func (c *JetStreamCollector) collectCompositions(ctx context.Context, ch chan<- prometheus.Metric) {
	bucket := c.cfg.Names.CompositionsBucket
	if bucket == "" || c.cfg.CompositionState == nil {
		return
	}
	counts, err := c.countEntries(ctx, bucket, func(b []byte) string {
		if st, ok := c.cfg.CompositionState(b); ok && slices.Contains(CompositionStates, st) {
			return st
		}
		return Other
	})
	if err != nil {
		c.fail("compositions", err, "bucket", bucket)
		return
	}
	for _, st := range CompositionStates {
		ch <- prometheus.MustNewConstMetric(c.compositions, prometheus.GaugeValue, float64(counts[st]), st)
	}
	if n := counts[Other]; n > 0 {
		ch <- prometheus.MustNewConstMetric(c.compositions, prometheus.GaugeValue, float64(n), Other)
	}
}

// countContinuations counts the bucket's live entries by trigger label. A
// missing bucket means no capsule was ever paused.
func (c *JetStreamCollector) countContinuations(ctx context.Context, bucket string) (map[string]int, error) {
	return c.countEntries(ctx, bucket, func(b []byte) string {
		var cont capsule.Continuation
		if json.Unmarshal(b, &cont) == nil {
			return TriggerLabel(cont.Trigger)
		}
		return Other
	})
}

// countEntries counts bucket's live entries by the label each value gets.
// It reads them with one watcher (one ordered consumer) instead of a
// request per key. A missing bucket has nothing to count.
func (c *JetStreamCollector) countEntries(ctx context.Context, bucket string, label func([]byte) string) (map[string]int, error) {
	counts := map[string]int{}
	kv, err := c.js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return counts, nil
	}
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watcher closed")
			}
			if e == nil { // every current entry has been delivered
				return counts, nil
			}
			counts[label(e.Value())]++
		}
	}
}

func (c *JetStreamCollector) fail(what string, err error, args ...any) {
	c.scrapeErrors.Inc()
	c.cfg.Logger.Warn("metrics: jetstream scrape", append([]any{"read", what, "error", err}, args...)...)
}
