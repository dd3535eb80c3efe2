package metrics

import (
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagad/sagad/capsule"
)

// exemplarEvery is how long a bucket keeps its exemplar before an
// observation may replace it. A scrape shows one exemplar per bucket, so
// giving one to every observation (client_golang builds a label map,
// validates it and reads the clock each time) bought nothing a scraper
// sees but the last one; once a second a bucket still shows a trace of
// its latest second.
const exemplarEvery = time.Second

// latency is one series of a latency histogram, cached so that the hot
// path neither hashes its label values nor builds an exemplar for an
// observation whose bucket was given one less than [exemplarEvery] ago.
type latency struct {
	count prometheus.Counter // the series' counter beside it, if any
	obs   prometheus.Observer
	eo    prometheus.ExemplarObserver // nil if obs takes no exemplars
	upper []float64
	// last holds, per bucket (the last one is +Inf), when that bucket was
	// last given an exemplar: nanoseconds since the recorder was made, plus
	// one (0 is never).
	last []atomic.Int64
}

func newLatency(count prometheus.Counter, obs prometheus.Observer, upper []float64) *latency {
	eo, _ := obs.(prometheus.ExemplarObserver)
	return &latency{count: count, obs: obs, eo: eo, upper: upper, last: make([]atomic.Int64, len(upper)+1)}
}

// observe records v, with traceID as its exemplar when it is a W3C trace
// id (32 lower-case hex digits, not all zero) and v's bucket's exemplar is
// older than [exemplarEvery] (or it has none).
func (l *latency) observe(v float64, traceID string, now func() time.Time, since time.Time) {
	if l.eo != nil && traceID != "" && validTraceID(traceID) {
		// The bucket the histogram counts v in: the first upper bound ≥ v.
		i := sort.SearchFloat64s(l.upper, v)
		// Monotonic when now is time.Now: a step of the wall clock neither
		// holds exemplars back nor lets them through. A clock that went
		// back (a test's) starts the bucket's second again.
		t, at := int64(now().Sub(since))+1, &l.last[i]
		if prev := at.Load(); (prev == 0 || t-prev >= int64(exemplarEvery) || t < prev) && at.CompareAndSwap(prev, t) {
			l.eo.ObserveWithExemplar(v, prometheus.Labels{ExemplarTraceID: traceID})
			return
		}
	}
	l.obs.Observe(v)
}

// latencies is a histogram vector's series by index, made at first use
// (a series of a closed label set appears when first observed, as with
// WithLabelValues).
type latencies struct {
	series []atomic.Pointer[latency]
	mk     func(i int) *latency
}

func newLatencies(n int, mk func(i int) *latency) *latencies {
	return &latencies{series: make([]atomic.Pointer[latency], n), mk: mk}
}

func (ls *latencies) at(i int) *latency {
	if l := ls.series[i].Load(); l != nil {
		return l
	}
	// Two makers of one series get the same children from the vectors;
	// the first stored keeps the exemplar times.
	ls.series[i].CompareAndSwap(nil, ls.mk(i))
	return ls.series[i].Load()
}

// phaseOutcome is the index of a (phase, outcome) series in a table of
// (NumPhases+1) × (len(Outcomes)+1), [Other] last on each axis.
func phaseOutcome(p capsule.Phase, outcome string) int {
	pi := int(p)
	if !p.Valid() {
		pi = int(capsule.NumPhases)
	}
	oi := slices.Index(Outcomes, outcome)
	if oi < 0 {
		oi = len(Outcomes)
	}
	return pi*(len(Outcomes)+1) + oi
}

// phaseOutcomeLabels are the label values of the series at i.
func phaseOutcomeLabels(i int) (phase, outcome string) {
	pi, oi := i/(len(Outcomes)+1), i%(len(Outcomes)+1)
	phase, outcome = Other, Other
	if pi < int(capsule.NumPhases) {
		phase = capsule.Phase(pi).String()
	}
	if oi < len(Outcomes) {
		outcome = Outcomes[oi]
	}
	return phase, outcome
}

// callKind is the index of kind in CallKinds, len(CallKinds) for [Other].
func callKind(kind string) int {
	if i := slices.Index(CallKinds, kind); i >= 0 {
		return i
	}
	return len(CallKinds)
}

func callKindLabel(i int) string {
	if i < len(CallKinds) {
		return CallKinds[i]
	}
	return Other
}
