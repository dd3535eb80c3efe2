package compose

import (
	"context"
	"slices"
	"time"

	"github.com/sagad/sagad/store"
)

// decideLoop decides on loop k of rec, stopped for no_progress: accepted,
// the loop counts as passed and the steps after it start on its last
// round's capsules (a step of that round that did not complete is read
// by its last artifact, not waited for); rejected, the loop fails and the
// steps after it never start. The run goes on (or ends) by the usual rule.
// The same answer again is no error: a decision a crash interrupted (its
// steps recorded, not yet published) is finished by deciding again.
func decideLoop(ctx context.Context, st *store.Store, rec *Record, k int, accept bool, by, reason string) (*Record, error) {
	now := time.Now().UTC()
	rec, err := settle(ctx, st, rec, now) // a decision made before, its steps not yet published
	if err != nil {
		return nil, err
	}
	rec, err = apply(ctx, st, keyOf(rec), Event{Kind: KindGateDecided, At: now, Step: rec.Loops[k].Verifier(), Accept: accept, By: by, Reason: reason}, inputs(ctx, st))
	if err != nil {
		return nil, err
	}
	if rec, err = settle(ctx, st, rec, now); err != nil {
		return rec, err
	}
	return rec, finishRun(ctx, st, rec, now, nil)
}

// WaitingLoop is a verification loop stopped for no_progress: a run that
// waits for a person's decision on its verifier (`sagactl pending` lists
// them).
type WaitingLoop struct {
	CompositionID string `json:"composition_id"`
	Producer      string `json:"producer,omitempty"`
	Run           int    `json:"run"`
	// Verifier names the step to decide on; CapsuleID is its last round's.
	Verifier  string `json:"verifier"`
	CapsuleID string `json:"capsule_id"`
	Round     int    `json:"round"`
	// Findings are the verifier's findings count per round, oldest first.
	Findings []int     `json:"findings"`
	Since    time.Time `json:"since"`
}

// Waiting lists the loops stopped for no_progress among up to limit
// composition runs, oldest first.
func Waiting(ctx context.Context, st *store.Store, limit int) ([]WaitingLoop, error) {
	if st.Compositions == nil {
		return nil, nil
	}
	recs, err := listRecords(ctx, st, limit)
	if err != nil {
		return nil, err
	}
	var out []WaitingLoop
	for _, rec := range recs {
		if rec.State == StateCancelled {
			continue
		}
		for _, l := range rec.Loops {
			if l.State != LoopNoProgress {
				continue
			}
			w := WaitingLoop{CompositionID: rec.CompositionID, Producer: rec.Producer, Run: rec.RunOf(),
				Verifier: stepName(rec, l.Verifier()), CapsuleID: rec.Steps[l.Verifier()], Round: l.Round, Since: rec.CreatedAt}
			if l.At != nil {
				w.Since = *l.At
			}
			for _, rd := range l.Rounds {
				w.Findings = append(w.Findings, rd.Findings)
			}
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b WaitingLoop) int { return a.Since.Compare(b.Since) })
	return out, nil
}
