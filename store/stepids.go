package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/jspub"
)

// A composition step's capsule id is known before sagad publishes the step:
// the compose reply names a step held after a verification loop, and a
// loop's next round is recorded before it is published. So that nobody else
// can run bytes of their own under such an id, every id sagad assigns to a
// step is reserved under "step.<capsule id>" in the compositions bucket before the
// record naming it is written (so before anyone can learn it), and RECEPTION
// refuses a capsule under a reserved id that is not sagad's own bytes for
// that step ([Compositions.IsStepID]). A reservation expires with the bucket's
// TTL, as the records do; one whose record was never written (a run lost to
// another sagad's at the same moment, a compare-and-set retried with fresh
// ids) names an id nobody was told, and is harmless.

// stepIDKey is where capsule id's reservation is: one token after "step",
// which no record key (hex digest first) or document key starts with.
func stepIDKey(capsuleID string) string { return "step." + capsuleID }

// stepReservation is a reservation's value: which run's step the id is, for
// a person reading the bucket. sagad reads only whether the key exists.
type stepReservation struct {
	CompositionID string `json:"chain_id"`
	Producer      string `json:"producer"`
	Run           int    `json:"run"`
	Step          int    `json:"step"`
}

// reserveSteps reserves ids, steps of r, before a write of r names them.
// Putting one again is harmless: ids are fresh, random, sagad's alone.
// The puts are sent together and their acknowledgements awaited together,
// under one write deadline: a 256-step composition reserves in about one
// round trip, not 256.
func (c *Compositions) reserveSteps(ctx context.Context, k RunKey, steps []StepRef) error {
	msgs := make([]*nats.Msg, 0, len(steps))
	for _, st := range steps {
		id := st.ID
		if !StepIDForm(id) {
			if !legacyStepIDForm(id) {
				// Not drawn by compose (a test's record): IsStepID never
				// looks such an id up, so reserving it would protect
				// nothing.
				continue
			}
			// An older sagad's step (a record written before version 8
			// ids, run on here): reserved again, and looked up here
			// for as long as the reservation lives.
			c.extendLegacy()
		}
		b, err := json.Marshal(stepReservation{CompositionID: k.ID, Producer: k.Producer, Run: max(k.Run, 1), Step: st.Step})
		if err != nil {
			return err
		}
		msgs = append(msgs, &nats.Msg{Subject: "$KV." + CompositionsBucket + "." + stepIDKey(id), Data: b})
	}
	if len(msgs) == 0 {
		return nil
	}
	err := (*jspub.Writes)(nil).Do(ctx, func(ctx context.Context) error {
		if c.js == nil {
			for _, m := range msgs {
				if _, err := c.kv.Put(ctx, m.Subject[len("$KV."+CompositionsBucket+"."):], m.Data); err != nil {
					return err
				}
			}
			return nil
		}
		acks := make([]jetstream.PubAckFuture, 0, len(msgs))
		for _, m := range msgs {
			f, err := c.js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			acks = append(acks, f)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("composition %s: reserve step ids: %w", k.ID, err)
	}
	return nil
}

// StepIDForm reports whether id has the form of the step ids compose draws
// (compose.NewStepIDs, whose test holds it to this): a lowercase version
// 8, RFC 9562 variant UUID. Only such ids are reserved, so only such ids
// are looked up (and, while an older sagad's reservations may live, the
// version 4 ids it drew: [Compositions.IsStepID]).
func StepIDForm(id string) bool { return uuidForm(id, '8') }

// legacyStepIDForm is the form step ids had before version 8: a lowercase
// version 4 UUID, which is also what producers draw.
func legacyStepIDForm(id string) bool { return uuidForm(id, '4') }

// uuidForm reports whether id is a lowercase UUID of version v and the
// RFC 9562 variant.
func uuidForm(id string, v byte) bool {
	if len(id) != 36 || id[14] != v || !strings.ContainsRune("89ab", rune(id[19])) {
		return false
	}
	for i, c := range id {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// scanTimeout bounds the start's scan of step reservations: headers only,
// at most 256 per run within the retention.
const scanTimeout = 30 * time.Second

// legacyForever: version 4 ids are looked up for ever (a bucket without TTL
// holds an older sagad's reservation).
const legacyForever = int64(^uint64(0) >> 1)

// ScanLegacy exists because a sagad before version 8 step ids reserved
// version 4 ids, the form producers draw too. Those reservations live until
// the bucket's TTL ends them; until then RECEPTION must keep looking
// version 4 ids up, or a plain capsule could take a step an older sagad
// assigned (held behind a loop, or waiting at a gate) across an upgrade.
//
// ScanLegacy reads which version 4 step reservations the bucket holds (their
// keys and times only) and sets until when IsStepID looks version 4 ids up:
// the newest one's write plus ttl (the bucket's TTL; 0 keeps them, and the
// lookups, for ever). With none, version 4 ids cost RECEPTION no read from
// now on. On an error nothing changes: every version 4 id is still looked
// up, which is safe and costs what it did.
func (c *Compositions) ScanLegacy(ctx context.Context, ttl time.Duration) error {
	w, err := c.kv.WatchFiltered(ctx, []string{stepIDKey("*")}, jetstream.MetaOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("step reservations: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var newest time.Time
	found := false
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("step reservations: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("step reservations: the watch ended")
			}
			if e == nil {
				// Every reservation present at the start was delivered.
				c.legacyTTL.Store(int64(ttl))
				c.legacyUntil.Store(legacyDeadline(found, newest, ttl))
				c.scanned.Store(true)
				return nil
			}
			if legacyStepIDForm(strings.TrimPrefix(e.Key(), "step.")) {
				found = true
				if e.Created().After(newest) {
					newest = e.Created()
				}
			}
		}
	}
}

// legacyDeadline is until when version 4 ids are looked up, given whether
// any version 4 reservation exists and the newest one's time.
func legacyDeadline(found bool, newest time.Time, ttl time.Duration) int64 {
	switch {
	case !found:
		return 0
	case ttl <= 0:
		return legacyForever
	}
	// A minute more than the TTL: the server removes expired entries on
	// its own schedule, and its clock is not ours.
	return newest.Add(ttl + time.Minute).UnixNano()
}

// lookedUp reports whether IsStepID must read the reservation of id.
func (c *Compositions) lookedUp(id string) bool {
	if StepIDForm(id) {
		return true
	}
	return legacyStepIDForm(id) && (!c.scanned.Load() || time.Now().UnixNano() < c.legacyUntil.Load())
}

// extendLegacy keeps version 4 ids looked up for as long as a reservation
// of one, written now, lives.
func (c *Compositions) extendLegacy() {
	if !c.scanned.Load() {
		return // every version 4 id is looked up anyway
	}
	until := legacyDeadline(true, time.Now(), time.Duration(c.legacyTTL.Load()))
	for {
		cur := c.legacyUntil.Load()
		if cur >= until || c.legacyUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// IsStepID reports whether sagad assigned capsuleID to a step of a
// composition run (held, gated, published or not): RECEPTION lets only
// sagad's own bytes for that step, which declare their chain membership,
// take it. The read is the stream leader's, as the record's is: the
// reservation is written before the compose reply names the id.
func (c *Compositions) IsStepID(ctx context.Context, capsuleID string) (bool, error) {
	if !c.lookedUp(capsuleID) {
		// Never reserved: a capsule with a ULID, a version 4 UUID (once no
		// older sagad's reservation can live), or any other form, costs
		// RECEPTION no read.
		return false, nil
	}
	_, _, err := c.get(ctx, stepIDKey(capsuleID))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("step id %s: %w", capsuleID, err)
	}
	return true, nil
}
