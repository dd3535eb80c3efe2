package console

import (
	"context"
	"github.com/sagad/sagad/compose"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/store"
)

// MarkSuperseded records that the capsules ids are of a superseded loop
// round or composition run (admin.SupersededIDs): their rows leave the
// inbox ("Needs you", its badge, the dead letters) and bulk selections,
// and stay in the list and under their run. A capsule superseded stays
// so, which keeps the inbox lists consistent: a row is never filed under
// a list it is later not taken out of.
func (x *Index) MarkSuperseded(ids []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		if x.superseded[id] {
			continue
		}
		var row *Row
		if key, ok := x.byID[id]; ok {
			row = x.rows[key]
		}
		if row != nil {
			if l := x.inboxList(row); l != nil {
				if i, ok := slices.BinarySearchFunc(*l, row, older); ok {
					*l = slices.Delete(*l, i, i+1)
				}
			}
		}
		x.superseded[id] = true
		if row != nil {
			x.broadcast(Change{Row: row})
		}
	}
}

// Superseded reports whether capsule id is of a superseded round or run.
func (x *Index) Superseded(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.superseded[id]
}

// runTracker turns the composition records it is shown into the capsule
// ids they make superseded: a loop's earlier rounds, and every capsule of
// a run once a later run of the same composition appears. It keeps the ids
// of each composition's latest run only, to hand them over when a later
// one comes.
type runTracker struct {
	latest  map[compositionOf]int
	members map[compositionOf]map[int][]string
}

// compositionOf names one producer's composition.
type compositionOf struct{ id, producer string }

func newRunTracker() *runTracker {
	return &runTracker{latest: map[compositionOf]int{}, members: map[compositionOf]map[int][]string{}}
}

// record takes one record (a new one or a change) and returns the ids it
// makes superseded (some perhaps known already).
func (t *runTracker) record(rec *compose.Record) []string {
	ids := admin.SupersededIDs(rec)
	k, run := compositionOf{rec.CompositionID, rec.Producer}, rec.RunOf()
	if run < t.latest[k] {
		return append(ids, admin.MemberIDs(rec)...)
	}
	if run > t.latest[k] {
		for r, m := range t.members[k] {
			if r < run {
				ids = append(ids, m...)
				delete(t.members[k], r)
			}
		}
		t.latest[k] = run
	}
	if t.members[k] == nil {
		t.members[k] = map[int][]string{}
	}
	t.members[k][run] = admin.MemberIDs(rec)
	return ids
}

// FollowCompositions keeps x's superseded capsules current from a watch of
// the composition records until ctx ends, opening the watch again a
// second after it ends early. Without a compositions bucket it does
// nothing.
func (x *Index) FollowCompositions(ctx context.Context, js jetstream.JetStream) {
	x.rewatch(ctx, "composition", func(ctx context.Context) error { return x.followRecords(ctx, js) })
}

func (x *Index) followRecords(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, store.CompositionsBucket)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	t := newRunTracker()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchClosed
			}
			if e == nil {
				continue
			}
			// The bucket keeps documents and step id reservations beside
			// the records: whatever is no record is not one to read.
			rec, err := compose.DecodeRecord(e.Value())
			if err != nil {
				continue
			}
			if ids := t.record(rec); len(ids) > 0 {
				x.MarkSuperseded(ids)
			}
		}
	}
}
