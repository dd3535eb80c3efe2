package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
)

// Wave admission (the WaveScheduler of the pipeline note).
//
// A wave's record holds, beside its caps and its total, the reservations
// of its running capsules: AUTOMATED_GATES reserves a capsule's caps before
// anything is spent ([Tracker.Reserve]), every charge of the capsule then
// moves what it used from its reservation to the total, and when the
// capsule ends what is left of its reservation is released
// ([Tracker.Release]). The capacity a new capsule may take is therefore
//
//	cap − used − reserved
//
// per capped dimension (tokens, dollars), and a running capsule that stays
// within its own caps never pushes used + reserved past what it reserved.
//
// Reservations are keyed by the holder (the capsule's checkpoint key) in the
// record's "holds" member, and every change is one compare-and-set of the
// record, so: a reservation made twice (a redelivered AUTOMATED_GATES, two
// sagads racing) is held once; a release made twice releases once; a charge
// consumes the holder's reservation in the same write that adds it to the
// total, under the charge's id.

// ErrWaveClosed refuses changing the caps of a closed wave: closing is final.
var ErrWaveClosed = errors.New("the wave is closed")

// MaxWaveProducers bounds a wave's admit list.
const MaxWaveProducers = 256

// ErrInvalidWave is an invalid wave id or cap.
var ErrInvalidWave = errors.New("invalid wave")

// dollarSlack absorbs float rounding when comparing dollar amounts, so that
// 0.1 fits in 10 - 9.9 (as Rule 19 did).
const dollarSlack = 1e-9

// Left is what the wave can still give a new capsule: cap − used − reserved
// per capped dimension, never below 0. An uncapped dimension reports -1.
func (w Wave) Left() (tokens int64, dollars float64) {
	tokens, dollars = -1, -1
	if w.TokensCap > 0 {
		tokens = max(w.TokensCap-w.Used.Tokens-w.Reserved.Tokens, 0)
	}
	if w.DollarsCap > 0 {
		dollars = max(w.DollarsCap-w.Used.Dollars-w.Reserved.Dollars, 0)
	}
	return tokens, dollars
}

// Fits reports whether caps fit in what the wave has left.
func (w Wave) Fits(caps capsule.Budget) bool {
	if w.TokensCap > 0 && w.Used.Tokens+w.Reserved.Tokens+caps.Tokens > w.TokensCap {
		return false
	}
	if w.DollarsCap > 0 && w.Used.Dollars+w.Reserved.Dollars+caps.Dollars > w.DollarsCap+dollarSlack {
		return false
	}
	return true
}

// CouldFit reports whether caps fit in the wave when nothing else is used or
// reserved: a capsule that could not waits until the cap is raised.
func (w Wave) CouldFit(caps capsule.Budget) bool {
	return (w.TokensCap == 0 || caps.Tokens <= w.TokensCap) && (w.DollarsCap == 0 || caps.Dollars <= w.DollarsCap+dollarSlack)
}

// Admission is the outcome of [Tracker.Reserve].
type Admission struct {
	// Admitted: the holder holds a reservation of its caps (made now, or
	// earlier).
	Admitted bool
	// Closed: the wave is closed and the holder holds no reservation.
	Closed bool
	// NotAdmitted: the wave admits a list of producers, and not the
	// holder's (and the holder holds no reservation).
	NotAdmitted bool
	// Wave is the wave as the decision saw it.
	Wave Wave
}

// ValidWaveID reports whether id can name a wave: the capsule schema's
// wave_id, 1 to 64 of [A-Za-z0-9_-].
func ValidWaveID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}

// Reserve reserves caps in the wave for holder if they fit what it has left
// and it is open. A holder that holds a reservation already is admitted
// again without a change (a redelivery, or a racing sagad), even if the wave
// was closed since. Nothing is written unless a reservation is made.
func (t *Tracker) Reserve(ctx context.Context, waveID, holder string, caps capsule.Budget) (Admission, error) {
	return t.ReserveFor(ctx, waveID, holder, "", caps)
}

// ReserveFor is [Tracker.Reserve] for a capsule of producer: a wave whose
// admit list does not name producer refuses it (NotAdmitted). Producer ""
// is sagad's own intake, which every wave admits (a producer's capsules
// never arrive there: their subject names them).
func (t *Tracker) ReserveFor(ctx context.Context, waveID, holder, producer string, caps capsule.Budget) (Admission, error) {
	if !ValidWaveID(waveID) || holder == "" || caps.Tokens < 0 || !(caps.Dollars >= 0) {
		return Admission{}, fmt.Errorf("budget: reserve %q for %q: %w", waveID, holder, ErrInvalidWave)
	}
	var a Admission
	r, err := t.update(ctx, waveKey(waveID), func(r *record) bool {
		a = Admission{}
		if _, ok := r.Holds[holder]; ok {
			a.Admitted = true
			return false
		}
		if r.Closed {
			a.Closed = true
			return false
		}
		if producer != "" && len(r.Producers) > 0 && !slices.Contains(r.Producers, producer) {
			a.NotAdmitted = true
			return false
		}
		if !r.wave().Fits(caps) {
			return false
		}
		if r.Holds == nil {
			r.Holds = map[string]capsule.Usage{}
		}
		hold := capsule.Usage{Tokens: caps.Tokens, Dollars: caps.Dollars}
		r.Holds[holder] = hold
		if producer != "" {
			if r.HoldBy == nil {
				r.HoldBy = map[string]string{}
			}
			r.HoldBy[holder] = producer
		}
		r.Reserved = r.Reserved.Add(hold)
		a.Admitted = true
		return true
	})
	if err != nil {
		return Admission{}, fmt.Errorf("budget: reserve wave %s for %s: %w", waveID, holder, err)
	}
	a.Wave = r.wave()
	return a, nil
}

// Release releases what is left of holder's reservation in the wave and
// reports it; ok is false when the holder held none (never reserved, or
// released already), and then nothing is written.
func (t *Tracker) Release(ctx context.Context, waveID, holder string) (released capsule.Usage, ok bool, err error) {
	if !ValidWaveID(waveID) || holder == "" {
		return capsule.Usage{}, false, fmt.Errorf("budget: release %q for %q: %w", waveID, holder, ErrInvalidWave)
	}
	// An end whose reservation is released already (a re-emitted ending),
	// or that never held one, costs the update's read alone: nothing to
	// change, nothing written.
	_, err = t.update(ctx, waveKey(waveID), func(r *record) bool {
		h, held := r.Holds[holder]
		released, ok = h, held
		if !held {
			return false
		}
		delete(r.Holds, holder)
		delete(r.HoldBy, holder)
		r.Reserved = subFloor(r.Reserved, h)
		if len(r.Holds) == 0 {
			r.Holds, r.Reserved = nil, capsule.Usage{} // no float residue
		}
		if len(r.HoldBy) == 0 {
			r.HoldBy = nil
		}
		return true
	})
	if err != nil {
		return capsule.Usage{}, false, fmt.Errorf("budget: release wave %s for %s: %w", waveID, holder, err)
	}
	return released, ok, nil
}

// consumeHold moves usage u of holder from its reservation to the total
// (which the caller adds u to): the reservation shrinks by what the capsule
// used, at most to 0. A holder without a reservation changes nothing.
func (r *record) consumeHold(holder string, u capsule.Usage) {
	h, ok := r.Holds[holder]
	if !ok {
		return
	}
	take := capsule.Usage{Tokens: min(u.Tokens, h.Tokens), Dollars: min(u.Dollars, h.Dollars)}
	r.Holds[holder] = subFloor(h, take)
	r.Reserved = subFloor(r.Reserved, take)
}

func subFloor(a, b capsule.Usage) capsule.Usage {
	return capsule.Usage{Tokens: max(a.Tokens-b.Tokens, 0), Dollars: max(a.Dollars-b.Dollars, 0)}
}

// WaveChange changes a wave's caps or closes it ([Tracker.ChangeWave]).
type WaveChange struct {
	// Tokens and Dollars, when set, are the new caps (0 = none).
	Tokens  *int64
	Dollars *float64
	// Close closes the wave: no capsule is admitted any more, and those
	// waiting for its capacity halt with wave_closed. It is final.
	Close bool
	// Producers, when set, is the new admit list: only these producers'
	// capsules may join the wave (empty: any). Reservations already held
	// stay.
	Producers *[]string
}

// ChangeWave creates the wave or changes its caps, or closes it, keeping
// its total and reservations, and returns it. Changing the caps of a closed
// wave is refused with [ErrWaveClosed]; closing it again changes nothing.
// A cap below what the wave has used and reserved already is allowed: no
// capsule is admitted until enough is released.
func (t *Tracker) ChangeWave(ctx context.Context, waveID string, ch WaveChange) (Wave, error) {
	switch {
	case !ValidWaveID(waveID):
		return Wave{}, fmt.Errorf("budget: wave %q: %w: want 1 to 64 of [A-Za-z0-9_-]", waveID, ErrInvalidWave)
	case ch.Tokens != nil && *ch.Tokens < 0:
		return Wave{}, fmt.Errorf("budget: wave %s: %w: tokens %d is negative", waveID, ErrInvalidWave, *ch.Tokens)
	case ch.Dollars != nil && !(*ch.Dollars >= 0 && *ch.Dollars < 1e15):
		return Wave{}, fmt.Errorf("budget: wave %s: %w: dollars %v is not a non-negative amount", waveID, ErrInvalidWave, *ch.Dollars)
	case ch.Producers != nil && len(*ch.Producers) > MaxWaveProducers:
		return Wave{}, fmt.Errorf("budget: wave %s: %w: more than %d producers", waveID, ErrInvalidWave, MaxWaveProducers)
	}
	if ch.Producers != nil {
		for _, p := range *ch.Producers {
			if !ValidWaveID(p) { // a producer name has a wave id's form
				return Wave{}, fmt.Errorf("budget: wave %s: %w: producer %q: want 1 to 64 of [A-Za-z0-9_-]", waveID, ErrInvalidWave, p)
			}
		}
	}
	var refused bool
	r, err := t.update(ctx, waveKey(waveID), func(r *record) bool {
		refused = false
		// A wave not stored yet is created even without caps (wave set
		// W): it is then listed, open and uncapped.
		changed := r.TokensCap == 0 && r.DollarsCap == 0 && !r.Closed && r.Used == (capsule.Usage{}) && len(r.Holds) == 0 && len(r.Applied) == 0
		if r.Closed && (ch.Tokens != nil || ch.Dollars != nil) {
			refused = true
			return false
		}
		if ch.Tokens != nil && r.TokensCap != *ch.Tokens {
			r.TokensCap, changed = *ch.Tokens, true
		}
		if ch.Dollars != nil && r.DollarsCap != *ch.Dollars {
			r.DollarsCap, changed = *ch.Dollars, true
		}
		if ch.Close && !r.Closed {
			r.Closed, changed = true, true
		}
		if ch.Producers != nil {
			list := slices.Clone(*ch.Producers)
			slices.Sort(list)
			list = slices.Compact(list)
			if len(list) == 0 {
				list = nil
			}
			if !slices.Equal(list, r.Producers) {
				r.Producers, changed = list, true
			}
		}
		return changed
	})
	if err != nil {
		return Wave{}, fmt.Errorf("budget: change wave %s: %w", waveID, err)
	}
	if refused {
		return r.wave(), fmt.Errorf("budget: wave %s: %w: its caps cannot change", waveID, ErrWaveClosed)
	}
	return r.wave(), nil
}

// NamedWave is a wave with its id.
type NamedWave struct {
	ID string
	Wave
}

// Waves returns every wave the bucket holds (set, charged or reserved),
// sorted by id.
func (t *Tracker) Waves(ctx context.Context) ([]NamedWave, error) {
	rctx, cancel := jspub.ReadCtx(ctx, t.w)
	defer cancel()
	w, err := t.kv.Watch(rctx, "wave.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("budget: list waves: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []NamedWave
	for {
		select {
		case <-rctx.Done():
			return nil, fmt.Errorf("budget: list waves: %w", rctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("budget: list waves: watcher closed")
			}
			if e == nil {
				sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
				return out, nil
			}
			r, err := t.decodeRecord(e)
			if err != nil {
				// One record sagad did not write must not hide the others.
				t.corrupt.Report(err, "left out of the list of waves")
				continue
			}
			out = append(out, NamedWave{ID: strings.TrimPrefix(e.Key(), "wave."), Wave: r.wave()})
		}
	}
}

// decodeRecord is the one decoder of a budget record. Every member must be
// one sagad writes: JetStream's answer to a publish, sent onto a key by a
// client that named it as its reply subject, would otherwise decode into
// an empty record (a wave without caps, open again). Bytes that are no
// record are a [corrupt.Error]: reading them again will not change them.
func (t *Tracker) decodeRecord(e jetstream.KeyValueEntry) (record, error) {
	r, err := decodeRecordBytes(e.Value())
	if err != nil {
		return record{}, corrupt.New(t.bucket, e.Key(), e.Revision(), err)
	}
	return r, nil
}

// decodeRecordBytes decodes b strictly (see decodeRecord).
func decodeRecordBytes(b []byte) (record, error) {
	var r record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(&r)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		return record{}, fmt.Errorf("not a budget record: %w", err)
	}
	return r, nil
}

// Holders returns the holders of the wave's reservations, sorted.
func (t *Tracker) Holders(ctx context.Context, waveID string) ([]string, error) {
	r, _, err := t.get(ctx, waveKey(waveID))
	if err != nil {
		return nil, fmt.Errorf("budget: holders of wave %s: %w", waveID, err)
	}
	out := make([]string, 0, len(r.Holds))
	for h := range r.Holds {
		out = append(out, h)
	}
	sort.Strings(out)
	return out, nil
}
