package store

import (
	"context"
	"strings"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
)

// setWrites makes w the policy of every write the store makes (see
// internal/jspub.Writes), one copy per stream and bucket so that a refusal
// by one of them is told apart from the others' successes (package health);
// the locks and budget buckets get theirs through their own configs.
func (s *Store) setWrites(w *jspub.Writes) {
	s.Checkpoints.w = w.On(CheckpointsBucket)
	s.Continuations.w = w.On(ContinuationsBucket)
	s.Artifacts.setWrites(w)
	// By target name, and by the exact subjects of the phase streams: a
	// phase message's policy is found without building a name per write.
	s.to = map[string]*jspub.Writes{"": w}
	for _, t := range []string{EventsStream, OutcomesStream, CapsulesBucket} {
		s.to[t] = w.On(t)
	}
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		s.to[PhaseSubject(p)] = w.On(PhaseStream(p))
	}
}

// writes is the policy of the store's reads' deadlines.
func (s *Store) writes() *jspub.Writes { return s.to[""] }

// writesTo is the policy of writes to target, a stream or bucket name.
func (s *Store) writesTo(target string) *jspub.Writes {
	if w, ok := s.to[target]; ok {
		return w
	}
	return s.to[""]
}

// writesFor is the policy of a publish on subject: that of the stream or
// bucket it lands in.
func (s *Store) writesFor(subject string) *jspub.Writes {
	if w, ok := s.to[subject]; ok {
		return w // a phase's
	}
	switch {
	case strings.HasPrefix(subject, EventsPrefix):
		return s.writesTo(EventsStream)
	case strings.HasPrefix(subject, OutcomePrefix):
		return s.writesTo(OutcomesStream)
	case strings.HasPrefix(subject, "$KV."+CapsulesBucket+"."):
		return s.writesTo(CapsulesBucket)
	}
	return s.to[""]
}

// readCtx bounds one read (jspub.ReadCtx).
func readCtx(ctx context.Context, w *jspub.Writes) (context.Context, context.CancelFunc) {
	return jspub.ReadCtx(ctx, w)
}
