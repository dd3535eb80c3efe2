package admin

import (
	"context"
	"errors"
	"slices"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/store"
)

// A capsule is superseded when the composition it is a step of has moved
// past it: it ran in a verification loop's round before the loop's last
// (the loop published its steps again, under fresh ids), or in a run of
// the composition before its latest (an edited document, new steps). Such
// a capsule is history of its run, shown under it (composition status, the
// console's composition page), not a dead letter: `sagactl pending`, the
// console's "Needs you" and bulk selections leave it out. Only the
// composition record decides: a capsule's own chain member merely says
// which record to read, and the record must list the capsule's id, so no
// producer hides a capsule by claiming a round or a run (docs/COMPOSITIONS.md).

// SupersededIDs are the capsule ids record rec itself makes superseded:
// those of its loops' rounds before each loop's last. The ids of a whole
// run a later run superseded are [MemberIDs] of its record.
func SupersededIDs(rec *compose.Record) []string {
	var out []string
	for _, l := range rec.Loops {
		for r := 0; r+1 < len(l.Rounds); r++ {
			out = append(out, l.Rounds[r].IDs...)
		}
	}
	return out
}

// MemberIDs are every capsule id of rec: its steps' and every loop
// round's.
func MemberIDs(rec *compose.Record) []string {
	out := slices.Clone(rec.Steps)
	for _, l := range rec.Loops {
		for _, r := range l.Rounds {
			out = append(out, r.IDs...)
		}
	}
	return out
}

// supersededCheck answers whether checkpoints are superseded, reading each
// composition run's record (and whether a later run exists) once: a list
// or the pending view asks about many steps of few runs.
type supersededCheck struct {
	st   *store.Store
	runs map[runOf]*runFacts
}

// runOf names one run of one producer's composition.
type runOf struct {
	id, producer string
	run          int
}

// runFacts is what one run's record says: the ids it superseded, every id
// it holds, and whether a later run exists.
type runFacts struct {
	superseded, members map[string]bool
	later               bool
}

func (a *Admin) supersededCheck() *supersededCheck {
	return &supersededCheck{st: a.st, runs: map[runOf]*runFacts{}}
}

// of reports whether cp is superseded. A record sagad cannot read leaves
// the capsule shown (an error is never a reason to hide work from a
// person).
func (s *supersededCheck) of(ctx context.Context, cp *capsule.Checkpoint) bool {
	if s.st.Compositions == nil || cp.Chain == nil {
		return false
	}
	k := runOf{id: cp.Chain.ID, producer: cp.Producer, run: max(cp.Chain.Run, 1)}
	f, ok := s.runs[k]
	if !ok {
		f = s.read(ctx, k)
		s.runs[k] = f
	}
	if f == nil || !f.members[cp.CapsuleID] {
		return false
	}
	return f.later || f.superseded[cp.CapsuleID]
}

// read is k's facts, or nil when its record cannot be read.
func (s *supersededCheck) read(ctx context.Context, k runOf) *runFacts {
	rec, err := compose.GetRun(ctx, s.st, k.id, k.producer, k.run)
	if err != nil {
		return nil
	}
	f := &runFacts{superseded: set(SupersededIDs(rec)), members: set(MemberIDs(rec))}
	_, err = compose.GetRun(ctx, s.st, k.id, k.producer, k.run+1)
	switch {
	case err == nil:
		f.later = true
	case !errors.Is(err, store.ErrNotFound):
		return nil
	}
	return f
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
