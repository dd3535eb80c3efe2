package metrics

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/sagad/sagad/capsule"
)

// MaxSpendLabelValues bounds the distinct values of each spend label (kind,
// wave): wave ids are the operators' to choose and kinds the config's, so
// values past the first this many a sagad saw are counted as
// [Other].
const MaxSpendLabelValues = 50

// SpendNone is the spend label value of a capsule without a wave (or
// kind); values past [MaxSpendLabelValues] are [Other].
const SpendNone = "none"

// spend counts what agent calls charged, by the capsule's task kind and
// wave: a cost breakdown Prometheus can keep (no capsule ids).
type spend struct {
	tokens, dollars             *prometheus.CounterVec
	failedTokens, failedDollars *prometheus.CounterVec
	kinds, waves                boundedLabel
}

func newSpend(f promauto.Factory) *spend {
	labels := []string{"kind", "wave"}
	s := &spend{
		tokens: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_spend_tokens_total",
			Help: "Tokens charged by executor and reviewer calls, failed ones included, by task kind and wave (at most 50 values each, the rest \"other\").",
		}, labels),
		dollars: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_spend_dollars_total",
			Help: "Dollars charged by executor and reviewer calls, failed ones included, by task kind and wave.",
		}, labels),
		failedTokens: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_spend_failed_tokens_total",
			Help: "Tokens charged by executor and reviewer calls that failed (Rule 16), by task kind and wave.",
		}, labels),
		failedDollars: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_spend_failed_dollars_total",
			Help: "Dollars charged by executor and reviewer calls that failed (Rule 16), by task kind and wave.",
		}, labels),
		kinds: boundedLabel{max: MaxSpendLabelValues},
		waves: boundedLabel{max: MaxSpendLabelValues},
	}
	// One series at zero from the start, so the metrics exist (for
	// absent() and the dashboard) before the first charge.
	for _, v := range []*prometheus.CounterVec{s.tokens, s.dollars, s.failedTokens, s.failedDollars} {
		v.WithLabelValues(SpendNone, SpendNone)
	}
	return s
}

// Spend adds what one agent call of a capsule of task kind in wave (""
// for none) charged; failed says the call failed. Negative or non-finite
// amounts are ignored.
func (m *Metrics) Spend(kind, wave string, u capsule.Usage, failed bool) {
	if m == nil || m.spend == nil {
		return
	}
	s := m.spend
	k, w := s.kinds.value(kind), s.waves.value(wave)
	if u.Tokens > 0 {
		s.tokens.WithLabelValues(k, w).Add(float64(u.Tokens))
		if failed {
			s.failedTokens.WithLabelValues(k, w).Add(float64(u.Tokens))
		}
	}
	if u.Dollars > 0 && !math.IsInf(u.Dollars, 0) {
		s.dollars.WithLabelValues(k, w).Add(u.Dollars)
		if failed {
			s.failedDollars.WithLabelValues(k, w).Add(u.Dollars)
		}
	}
}

// boundedLabel keeps the first max distinct values of a label and maps
// every later one to [Other].
type boundedLabel struct {
	max  int
	mu   sync.Mutex
	seen map[string]struct{}
}

func (b *boundedLabel) value(v string) string {
	if v == "" {
		return SpendNone
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return Other
	}
	if b.seen == nil {
		b.seen = map[string]struct{}{}
	}
	b.seen[v] = struct{}{}
	return v
}
