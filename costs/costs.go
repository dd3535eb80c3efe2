package costs

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Groupings: what [Summarise] groups by.
const (
	ByWave        = "wave"
	ByChain       = "chain"
	ByComposition = "composition"
	ByProducer    = "producer"
	ByKind        = "kind"
	ByDay         = "day"
)

// Groupings lists every grouping, the first the default.
var Groupings = []string{ByWave, ByChain, ByComposition, ByProducer, ByKind, ByDay}

// ValidBy reports whether by names a grouping.
func ValidBy(by string) bool { return slices.Contains(Groupings, by) }

// None is the group of capsules without the grouped field (no wave, no
// chain, sagad's own intake, an unknown kind).
const None = "-"

// Other is the group the groups past a report's limit fold into.
const Other = "other"

// Entry is one capsule's spend, what [Of] reads from its checkpoint.
type Entry struct {
	Key   string
	Wave  string
	Chain string
	// Composition is the composition and run the capsule is a step of:
	// its chain id, with "#<run>" from run 2 (every composition's steps
	// carry chain {id, step, run}; a chain document is a composition).
	Composition string
	Producer    string
	Kind        string
	// Created is when the capsule arrived; its day groups ByDay.
	Created time.Time
	// Used is everything the capsule spent, failed attempts included.
	Used capsule.Usage
	// Failed: the capsule halted or was cancelled, so its spend bought no
	// result.
	Failed bool
	// FailedAttempts counts the failed agent calls its checkpoint records
	// (the current cycle's: earlier cycles' counts are not kept).
	FailedAttempts int
	// Reserved is what the capsule still holds of its wave's capacity:
	// its reservation less what it used, while it runs.
	Reserved capsule.Usage
}

// CompositionWavePrefix starts the id of the wave that holds a
// composition's budget: composition-<a step's capsule id> (compose.WaveID).
// People know the composition by its name, not by that id: reports name
// it ([CompositionOf] of that step's checkpoint) beside the wave id.
const CompositionWavePrefix = "composition-"

// CompositionOf is the composition cp is a step of, as reports name it:
// its composition_id, with "#<run>" from run 2; "" for a capsule that is
// no composition's step.
func CompositionOf(cp *capsule.Checkpoint) string {
	if cp == nil || cp.Chain == nil {
		return ""
	}
	if cp.Chain.Run > 1 {
		return cp.Chain.ID + "#" + strconv.Itoa(cp.Chain.Run)
	}
	return cp.Chain.ID
}

// Of reads cp's spend; kind is its task kind ("" when unknown).
func Of(cp *capsule.Checkpoint, kind string) Entry {
	st := cp.State
	e := Entry{Key: cp.Key, Wave: cp.WaveID, Producer: cp.Producer, Kind: kind, Created: cp.CreatedAt, Used: st.BudgetUsed,
		Failed: st.Status == capsule.Halted || st.Status == capsule.Cancelled}
	if cp.Chain != nil {
		e.Chain, e.Composition = cp.Chain.ID, CompositionOf(cp)
	}
	if st.Attempts != nil {
		e.FailedAttempts = st.Attempts.Failed
	}
	if r := st.WaveReserved; r != nil && !cp.Terminal() {
		e.Reserved = capsule.Usage{Tokens: max(r.Tokens-st.BudgetUsed.Tokens, 0), Dollars: math.Max(r.Dollars-st.BudgetUsed.Dollars, 0)}
	}
	return e
}

// Group is the spend of one group of capsules.
type Group struct {
	// Key is the group's value (a wave id, a day as 2006-01-02...); "-"
	// for capsules without one, "other" for the groups folded together.
	Key string `json:"key"`
	// Name is, grouping by wave, the composition whose budget the wave
	// is (a wave named composition-<uuid>): its composition_id, with
	// "#<run>" from run 2. Absent for other groups.
	Name     string `json:"name,omitempty"`
	Capsules int    `json:"capsules"`
	Tokens   int64  `json:"tokens"`
	// Dollars is rounded to the cent.
	Dollars float64 `json:"dollars"`
	// FailedTokens and FailedDollars are the part spent by capsules that
	// halted or were cancelled; FailedShare is that part's share of the
	// group's spend (of its dollars, or of its tokens when it spent no
	// dollars), 0 to 1.
	FailedTokens   int64   `json:"failed_tokens"`
	FailedDollars  float64 `json:"failed_dollars"`
	FailedShare    float64 `json:"failed_share"`
	FailedCapsules int     `json:"failed_capsules"`
	FailedAttempts int     `json:"failed_attempts"`
	// ReservedTokens and ReservedDollars are the wave reservations the
	// group's running capsules still hold.
	ReservedTokens  int64   `json:"reserved_tokens"`
	ReservedDollars float64 `json:"reserved_dollars"`
	// EstimatedCapsules counts the capsules whose tokens are, at least in
	// part, sagad's estimate (an agent that reported no usage).
	EstimatedCapsules int `json:"estimated_capsules,omitempty"`
}

// Day is one day's spend, the series a chart draws.
type Day struct {
	Day           string  `json:"day"`
	Tokens        int64   `json:"tokens"`
	Dollars       float64 `json:"dollars"`
	FailedDollars float64 `json:"failed_dollars"`
	FailedTokens  int64   `json:"failed_tokens"`
}

// Report is a summary of spend.
type Report struct {
	By string `json:"by"`
	// Since is the earliest creation time counted; absent: all.
	Since *time.Time `json:"since,omitempty"`
	// Groups are sorted by dollars, then tokens, most first; past the
	// limit the rest fold into one "other" group.
	Groups []Group `json:"groups"`
	// Total sums every capsule counted (key "total").
	Total Group `json:"total"`
	// Days is the spend per day of creation, oldest first, at most
	// [MaxDays] (the latest).
	Days []Day `json:"days"`
	// Note says why a grouping is empty or partial.
	Note string `json:"note,omitempty"`
	// Unpriced are the models sagad's model endpoints may call that have
	// no price in its models config: their calls were charged tokens
	// only, so the dollars undercount them (docs/MODELS.md).
	Unpriced []string `json:"unpriced_models,omitempty"`
}

// Bounds of a report, so a reply stays small whatever the store holds.
const (
	DefaultGroups = 50
	MaxGroups     = 500
	MaxDays       = 366
)

// Summarise groups entries created at or after since (zero: all) by by,
// keeping the limit groups that spent most (0: [DefaultGroups]).
func Summarise(entries []Entry, by string, since time.Time, limit int) (Report, error) {
	if !ValidBy(by) {
		return Report{}, fmt.Errorf("costs: no grouping %q (want one of %v)", by, Groupings)
	}
	if limit <= 0 {
		limit = DefaultGroups
	}
	limit = min(limit, MaxGroups)
	r := Report{By: by, Groups: []Group{}, Days: []Day{}, Total: Group{Key: "total"}}
	if !since.IsZero() {
		s := since.UTC()
		r.Since = &s
	}
	groups := map[string]*Group{}
	days := map[string]*Day{}
	for _, e := range entries {
		if !since.IsZero() && e.Created.Before(since) {
			continue
		}
		add(&r.Total, e)
		d := e.Created.UTC().Format(time.DateOnly)
		day := days[d]
		if day == nil {
			day = &Day{Day: d}
			days[d] = day
		}
		day.Tokens += e.Used.Tokens
		day.Dollars += e.Used.Dollars
		if e.Failed {
			day.FailedTokens += e.Used.Tokens
			day.FailedDollars += e.Used.Dollars
		}
		k := keyOf(e, by)
		g := groups[k]
		if g == nil {
			g = &Group{Key: k}
			groups[k] = g
		}
		if by == ByWave && e.Composition != "" && k == CompositionWavePrefix+e.Key {
			// The step whose id the wave carries names it: sagad
			// published that one, where any capsule may join a wave.
			g.Name = e.Composition
		}
		add(g, e)
	}
	all := make([]Group, 0, len(groups))
	for _, g := range groups {
		all = append(all, *g)
	}
	if by == ByDay {
		slices.SortFunc(all, func(a, b Group) int { return cmp.Compare(a.Key, b.Key) })
		if len(all) > limit {
			all = all[len(all)-limit:] // the latest days
			r.Note = fmt.Sprintf("the latest %d days of %d", limit, len(groups))
		}
	} else {
		slices.SortFunc(all, func(a, b Group) int {
			return cmp.Or(cmp.Compare(b.Dollars, a.Dollars), cmp.Compare(b.Tokens, a.Tokens), cmp.Compare(a.Key, b.Key))
		})
		if len(all) > limit {
			other := Group{Key: Other}
			for _, g := range all[limit-1:] {
				merge(&other, g)
			}
			all = append(all[:limit-1], other)
		}
	}
	for i := range all {
		finish(&all[i])
	}
	r.Groups = all
	finish(&r.Total)
	for _, d := range days {
		d.Dollars, d.FailedDollars = cents(d.Dollars), cents(d.FailedDollars)
		r.Days = append(r.Days, *d)
	}
	slices.SortFunc(r.Days, func(a, b Day) int { return cmp.Compare(a.Day, b.Day) })
	if len(r.Days) > MaxDays {
		r.Days = r.Days[len(r.Days)-MaxDays:]
	}
	return r, nil
}

func keyOf(e Entry, by string) string {
	var k string
	switch by {
	case ByWave:
		k = e.Wave
	case ByChain:
		k = e.Chain
	case ByComposition:
		k = e.Composition
	case ByProducer:
		k = e.Producer
	case ByKind:
		k = e.Kind
	case ByDay:
		k = e.Created.UTC().Format(time.DateOnly)
	}
	return cmp.Or(k, None)
}

func add(g *Group, e Entry) {
	g.Capsules++
	g.Tokens += e.Used.Tokens
	g.Dollars += e.Used.Dollars
	if e.Failed {
		g.FailedCapsules++
		g.FailedTokens += e.Used.Tokens
		g.FailedDollars += e.Used.Dollars
	}
	g.FailedAttempts += e.FailedAttempts
	g.ReservedTokens += e.Reserved.Tokens
	g.ReservedDollars += e.Reserved.Dollars
	if e.Used.Estimated {
		g.EstimatedCapsules++
	}
}

func merge(g *Group, o Group) {
	g.Capsules += o.Capsules
	g.Tokens += o.Tokens
	g.Dollars += o.Dollars
	g.FailedCapsules += o.FailedCapsules
	g.FailedTokens += o.FailedTokens
	g.FailedDollars += o.FailedDollars
	g.FailedAttempts += o.FailedAttempts
	g.ReservedTokens += o.ReservedTokens
	g.ReservedDollars += o.ReservedDollars
	g.EstimatedCapsules += o.EstimatedCapsules
}

// finish computes the share and rounds the dollars, once the sums are done
// (rounding each capsule's would lose cents over many).
func finish(g *Group) {
	switch {
	case g.Dollars > 0:
		g.FailedShare = g.FailedDollars / g.Dollars
	case g.Tokens > 0:
		g.FailedShare = float64(g.FailedTokens) / float64(g.Tokens)
	}
	g.FailedShare = math.Round(g.FailedShare*1e4) / 1e4
	g.Dollars, g.FailedDollars, g.ReservedDollars = cents(g.Dollars), cents(g.FailedDollars), cents(g.ReservedDollars)
}

// cents rounds dollars to the cent: 0.060000000000000005 is 0.06.
func cents(d float64) float64 { return math.Round(d*100) / 100 }
