package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
			// Not drawn by compose (a test's record): IsStepID never
			// looks such an id up, so reserving it would protect nothing.
			continue
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
// 4, RFC 9562 variant UUID. Only such ids are reserved, so only such ids
// are looked up.
func StepIDForm(id string) bool {
	if len(id) != 36 || id[14] != '4' || !strings.ContainsRune("89ab", rune(id[19])) {
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

// IsStepID reports whether sagad assigned capsuleID to a step of a
// composition run (held, gated, published or not): RECEPTION lets only
// sagad's own bytes for that step, which declare their chain membership,
// take it. The read is the stream leader's, as the record's is: the
// reservation is written before the compose reply names the id.
func (c *Compositions) IsStepID(ctx context.Context, capsuleID string) (bool, error) {
	if !StepIDForm(capsuleID) {
		// Never reserved: a capsule with a ULID, or any other form, costs
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
