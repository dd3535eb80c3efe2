package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"

	"github.com/sagad/sagad/capsule"
)

// Check compares used with caps and returns "" when within them, otherwise
// the first cap crossed, tokens before dollars: [capsule.BudgetTokens] or
// [capsule.BudgetDollars]. A cap is crossed when used exceeds it; reaching it
// exactly is within. A cap of 0 is no cap (RECEPTION refuses a capsule whose
// token cap is not positive, so only dollars are uncapped in practice).
func Check(used capsule.Usage, caps capsule.Budget) string {
	switch {
	case caps.Tokens > 0 && used.Tokens > caps.Tokens:
		return capsule.BudgetTokens
	case caps.Dollars > 0 && used.Dollars > caps.Dollars:
		return capsule.BudgetDollars
	}
	return ""
}

// Fraction returns the largest share of a cap that used consumes (1 = the
// whole cap), the figure the budget_warning pause trigger compares with its
// threshold. Caps of 0 are ignored; with no cap at all it returns 0.
func Fraction(used capsule.Usage, caps capsule.Budget) float64 {
	var f float64
	if caps.Tokens > 0 {
		f = float64(used.Tokens) / float64(caps.Tokens)
	}
	if caps.Dollars > 0 {
		f = max(f, used.Dollars/caps.Dollars)
	}
	return f
}

// checkWave is Check against a wave's caps, naming the wave reasons.
func checkWave(w Wave) string {
	switch Check(w.Used, capsule.Budget{Tokens: w.TokensCap, Dollars: w.DollarsCap}) {
	case capsule.BudgetTokens:
		return capsule.BudgetWaveTokens
	case capsule.BudgetDollars:
		return capsule.BudgetWaveDollars
	}
	return ""
}

// Config configures a [Tracker].
type Config struct {
	// Bucket is the KV bucket holding the totals. Defaults to "SAGA_BUDGETS".
	Bucket string
	// Replicas is the bucket's replica count. Defaults to 1.
	Replicas int
	// Storage is the bucket's storage. Defaults to jetstream.FileStorage.
	Storage jetstream.StorageType
	// Writes bounds and observes every write to the bucket. Nil bounds
	// each by jspub.DefaultTimeout.
	Writes *jspub.Writes
	// Corrupt reports the records sagad did not write that a list leaves
	// out (a read returns them as a [corrupt.Error]). Nil reports nothing.
	Corrupt *corrupt.Reporter
}

func (c Config) withDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = "SAGA_BUDGETS"
	}
	if c.Writes != nil && c.Writes.Target == "" {
		c.Writes = c.Writes.On(c.Bucket) // its failures are told apart (package health)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c
}

func (c Config) validate() error {
	if c.Replicas < 1 {
		return fmt.Errorf("budget: replicas must be at least 1, got %d", c.Replicas)
	}
	return nil
}

// Tracker keeps capsule and wave totals in the KV bucket. It is safe for
// concurrent use, and any number of Trackers (in any number of processes) may
// share a bucket.
type Tracker struct {
	kv      jetstream.KeyValue
	w       *jspub.Writes
	bucket  string
	corrupt *corrupt.Reporter
	// chargedAt, set only by tests, is called after each ancestor a
	// [Tracker.ChargeAncestors] charged, so a test can run an end or an
	// admission between two of its writes.
	chargedAt func(ancestor string)
}

// New returns a Tracker on cfg.Bucket, creating the bucket or updating its
// configuration as needed.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Tracker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "sagad capsule and wave budgets (Rule 16)",
		History:     1,
		Replicas:    cfg.Replicas,
		Storage:     cfg.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("budget: bucket %s: %w", cfg.Bucket, err)
	}
	return &Tracker{kv: kv, w: cfg.Writes, bucket: cfg.Bucket, corrupt: cfg.Corrupt}, nil
}

// Wave is a wave's budget: its caps (0 = none), what its capsules used in
// total, and whether it is closed to new capsules.
type Wave struct {
	TokensCap  int64
	DollarsCap float64
	Used       capsule.Usage
	Closed     bool
	// Reserved is what the wave's running capsules reserved at admission
	// and have not used (yet): capacity no new capsule may take.
	Reserved capsule.Usage
	// Holders counts the capsules holding a reservation.
	Holders int
	// Producers are the producers the wave admits; empty: any.
	Producers []string
	// ByProducer is who holds the wave's reservations: per producer ("-"
	// for sagad's own intake), its capsules holding one and what they
	// hold.
	ByProducer map[string]ProducerHold
}

// ProducerHold is one producer's share of a wave's reservations.
type ProducerHold struct {
	Capsules int           `json:"capsules"`
	Reserved capsule.Usage `json:"reserved"`
}

// ChargeResult is the outcome of [Tracker.Charge].
type ChargeResult struct {
	// Capsule is the capsule's total after the charge.
	Capsule capsule.Usage
	// Wave is the wave's total after the charge; zero without a wave.
	Wave capsule.Usage
	// Exceeded is the first cap crossed, in the order tokens, dollars,
	// wave_tokens, wave_dollars; "" when within every cap.
	Exceeded string
}

// record is the JSON value of a key.
type record struct {
	TokensCap  int64         `json:"tokens_cap"`
	DollarsCap float64       `json:"dollars_cap"`
	Used       capsule.Usage `json:"used"`
	Closed     bool          `json:"closed"`
	Applied    []string      `json:"applied,omitempty"`
	// Reserved and Holds are a wave's reservations (see wave.go): their
	// sum, and each holder's (a capsule key) remaining part.
	Reserved capsule.Usage            `json:"reserved,omitzero"`
	Holds    map[string]capsule.Usage `json:"holds,omitempty"`
	// Producers is the wave's admit list (empty: any producer).
	Producers []string `json:"producers,omitempty"`
	// HoldBy names the producer of each holder with a producer (a holder
	// absent from it came from sagad's own intake).
	HoldBy map[string]string `json:"hold_by,omitempty"`
	// Parent, Children and ChildrenMore are a parent capsule's family
	// record (family.go): its own parent, its children (the first
	// [MaxChildrenListed]) and how many more it has.
	Parent       string   `json:"parent,omitempty"`
	Children     []string `json:"children,omitempty"`
	ChildrenMore int      `json:"children_more,omitempty"`
	// Own is, in a family record, the parent's own spend; Ended says the
	// parent ended (tree.go).
	Own   capsule.Usage `json:"own,omitzero"`
	Ended bool          `json:"ended,omitempty"`
}

func (r record) wave() Wave {
	w := Wave{TokensCap: r.TokensCap, DollarsCap: r.DollarsCap, Used: r.Used, Closed: r.Closed, Reserved: r.Reserved, Holders: len(r.Holds),
		Producers: slices.Clone(r.Producers)}
	if len(r.Holds) > 0 {
		w.ByProducer = make(map[string]ProducerHold)
		for h, u := range r.Holds {
			p := r.HoldBy[h]
			if p == "" {
				p = "-"
			}
			ph := w.ByProducer[p]
			ph.Capsules++
			ph.Reserved = ph.Reserved.Add(u)
			w.ByProducer[p] = ph
		}
	}
	return w
}

// appliedWindow is how many charge ids a record remembers.
const appliedWindow = 32

// apply adds the charge to r unless r already has it, and reports whether it
// did.
func (r *record) apply(chargeID string, u capsule.Usage) bool {
	return r.applyWindow(chargeID, u, appliedWindow)
}

// applyWindow is apply remembering the last window charge ids.
func (r *record) applyWindow(chargeID string, u capsule.Usage, window int) bool {
	if slices.Contains(r.Applied, chargeID) {
		return false
	}
	r.Used = r.Used.Add(u)
	r.Applied = append(r.Applied, chargeID)
	if n := len(r.Applied) - window; n > 0 {
		r.Applied = r.Applied[n:]
	}
	return true
}

func capsuleKey(id string) string { return "capsule." + id }

func waveKey(id string) string { return "wave." + id }

// Charge adds u to the capsule's total and, when waveID is not "", to the
// wave's, and reports the new totals and the first cap crossed: the capsule's
// caps (given, and stored with its total) or the wave's (from its record). The
// usage is recorded even when it crosses a cap: it happened.
//
// chargeID makes Charge idempotent: a charge already applied is not added
// again and Charge reports the totals as they stand.
func (t *Tracker) Charge(ctx context.Context, capsuleID, waveID, chargeID string, caps capsule.Budget, u capsule.Usage) (ChargeResult, error) {
	switch {
	case capsuleID == "":
		return ChargeResult{}, errors.New("budget: charge: empty capsule id")
	case chargeID == "":
		return ChargeResult{}, fmt.Errorf("budget: charge capsule %s: empty charge id", capsuleID)
	case u.Tokens < 0 || !(u.Dollars >= 0):
		return ChargeResult{}, fmt.Errorf("budget: charge %s: usage must be non-negative, got %+v", chargeID, u)
	}
	var w record
	if waveID != "" {
		// Only a wave charge needs to know first whether this charge was
		// applied already (see below); a capsule-only charge skips the read.
		done, _, err := t.get(ctx, capsuleKey(capsuleID))
		if err != nil {
			return ChargeResult{}, fmt.Errorf("budget: charge %s: capsule %s: %w", chargeID, capsuleID, err)
		}
		// A replay skips the wave write but still reports the wave's total.
		change := func(r *record) bool {
			if !r.apply(chargeID, u) {
				return false
			}
			r.consumeHold(capsuleID, u) // in the same write: exactly once
			return true
		}
		if slices.Contains(done.Applied, chargeID) {
			change = func(*record) bool { return false }
		}
		if w, err = t.update(ctx, waveKey(waveID), change); err != nil {
			return ChargeResult{}, fmt.Errorf("budget: charge %s: wave %s: %w", chargeID, waveID, err)
		}
	}
	c, err := t.update(ctx, capsuleKey(capsuleID), func(r *record) bool {
		applied := r.apply(chargeID, u)
		if !applied && r.TokensCap == caps.Tokens && r.DollarsCap == caps.Dollars {
			return false
		}
		r.TokensCap, r.DollarsCap = caps.Tokens, caps.Dollars
		return true
	})
	if err != nil {
		return ChargeResult{}, fmt.Errorf("budget: charge %s: capsule %s: %w", chargeID, capsuleID, err)
	}
	res := ChargeResult{Capsule: c.Used, Wave: w.Used, Exceeded: Check(c.Used, caps)}
	if res.Exceeded == "" && waveID != "" {
		res.Exceeded = checkWave(w.wave())
	}
	return res, nil
}

// Used returns the capsule's total; zero for a capsule never charged.
func (t *Tracker) Used(ctx context.Context, capsuleID string) (capsule.Usage, error) {
	r, _, err := t.get(ctx, capsuleKey(capsuleID))
	if err != nil {
		return capsule.Usage{}, fmt.Errorf("budget: used by capsule %s: %w", capsuleID, err)
	}
	return r.Used, nil
}

// SetWave creates the wave or updates its caps (0 = none) and closed flag,
// keeping its total.
func (t *Tracker) SetWave(ctx context.Context, waveID string, tokensCap int64, dollarsCap float64, closed bool) error {
	if tokensCap < 0 || !(dollarsCap >= 0) {
		return fmt.Errorf("budget: set wave %s: caps must be non-negative, got %d tokens, %v dollars", waveID, tokensCap, dollarsCap)
	}
	_, err := t.update(ctx, waveKey(waveID), func(r *record) bool {
		r.TokensCap, r.DollarsCap, r.Closed = tokensCap, dollarsCap, closed
		return true
	})
	if err != nil {
		return fmt.Errorf("budget: set wave %s: %w", waveID, err)
	}
	return nil
}

// Wave returns the wave's budget; ok is false if the wave was never set or
// charged.
func (t *Tracker) Wave(ctx context.Context, waveID string) (w Wave, ok bool, err error) {
	r, rev, err := t.get(ctx, waveKey(waveID))
	if err != nil {
		return Wave{}, false, fmt.Errorf("budget: wave %s: %w", waveID, err)
	}
	return r.wave(), rev != 0, nil
}

// update applies change to key's record by compare-and-set (jspub.Mutate,
// under sagad's one retry policy), reading again and reapplying it when another
// writer got in between, and returns the record as stored. change reports
// whether it changed anything; if not, nothing is written.
func (t *Tracker) update(ctx context.Context, key string, change func(r *record) bool) (record, error) {
	r, _, err := jspub.Mutate(ctx, t.kv, t.w, key,
		func(ctx context.Context) (record, uint64, error) { return t.get(ctx, key) },
		func(r record) (record, jspub.Op, error) {
			if !change(&r) {
				return r, jspub.Keep, nil
			}
			return r, jspub.Put, nil
		})
	return r, err
}

// get reads key's record and revision; a missing key is a zero record at
// revision 0.
func (t *Tracker) get(ctx context.Context, key string) (record, uint64, error) {
	rctx, cancel := jspub.ReadCtx(ctx, t.w)
	e, err := t.kv.Get(rctx, key)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, 0, nil
	}
	if err != nil {
		return record{}, 0, err
	}
	r, err := t.decodeRecord(e)
	if err != nil {
		return record{}, 0, err
	}
	return r, e.Revision(), nil
}
