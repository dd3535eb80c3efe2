package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sagad/sagad/store"
)

// The record's typed access: store keeps the bytes, keys and revisions
// (store.Compositions); what they hold is this package's.

func (k runKey) store() store.RunKey { return store.RunKey{ID: k.id, Producer: k.producer, Run: k.run} }

// GetRun is run run of producer's composition id; it wraps
// store.ErrNotFound when there is none, and is a *corrupt.Error when its
// bytes do not decode.
func GetRun(ctx context.Context, st *store.Store, id, producer string, run int) (*Record, error) {
	k := runKey{id, producer, run}
	b, rev, err := st.Compositions.Get(ctx, k.store())
	if err != nil {
		return nil, err
	}
	r, err := DecodeRecord(b)
	if err != nil {
		return nil, st.Compositions.Corrupt(k.store(), rev, err)
	}
	return r, nil
}

// Get is run 1 of producer's composition id (see [GetRun]).
func Get(ctx context.Context, st *store.Store, id, producer string) (*Record, error) {
	return GetRun(ctx, st, id, producer, 1)
}

// CreateRecord stores r, a run's first record, unless its run exists
// (store.ErrCompositionExists), its step ids reserved first. The compose
// service creates a run so; every later change is a transition
// ([Transition]) under the store's compare-and-set.
func CreateRecord(ctx context.Context, st *store.Store, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return st.Compositions.Create(ctx, keyOf(r).store(), stepRefs(nil, r.Steps), b)
}

// updateRecord applies change to run k's record under the store's one
// compare-and-set retry, and returns the record as stored (as read when
// change returns store.ErrNoChange). Step ids change brings (a loop's new
// round) are reserved before the record names them.
func updateRecord(ctx context.Context, st *store.Store, k runKey, change func(*Record) error) (*Record, error) {
	var out *Record
	_, err := st.Compositions.Update(ctx, k.store(), func(b []byte) ([]byte, []store.StepRef, error) {
		r, err := DecodeRecord(b)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", store.ErrUndecodable, err)
		}
		before := slices.Clone(r.Steps)
		if err := change(r); err != nil {
			out = r
			return nil, nil, err
		}
		nb, err := json.Marshal(r)
		if err != nil {
			return nil, nil, err
		}
		out = r
		return nb, stepRefs(before, r.Steps), nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stepRefs are the ids of after's steps that before did not have, with
// their indexes.
func stepRefs(before, after []string) []store.StepRef {
	var refs []store.StepRef
	for i, id := range after {
		if !slices.Contains(before, id) {
			refs = append(refs, store.StepRef{ID: id, Step: i})
		}
	}
	return refs
}

// listRecords is up to limit records, every producer's and run; a
// record that does not decode is left out (reported where it is read by
// name).
func listRecords(ctx context.Context, st *store.Store, limit int) ([]*Record, error) {
	es, err := st.Compositions.List(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]*Record, 0, len(es))
	for _, e := range es {
		if r, err := DecodeRecord(e.Value); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// producers is the run-1 record of composition id of each producer that
// has one (at most limit); a record that does not decode is a
// *corrupt.Error.
func producers(ctx context.Context, st *store.Store, id string, limit int) ([]*Record, error) {
	es, err := st.Compositions.Producers(ctx, id, limit)
	if err != nil {
		return nil, err
	}
	out := make([]*Record, 0, len(es))
	for _, e := range es {
		r, err := DecodeRecord(e.Value)
		if err != nil {
			return nil, store.CorruptEntry(e, err)
		}
		out = append(out, r)
	}
	return out, nil
}
