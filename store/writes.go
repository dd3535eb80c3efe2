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
	s.Artifacts.w = w.On(ArtifactsBucket)
	s.to = map[string]*jspub.Writes{"": w}
	targets := []string{IntakeStream, EventsStream, OutcomesStream, CapsulesBucket}
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		targets = append(targets, PhaseStream(p))
	}
	for _, t := range targets {
		s.to[t] = w.On(t)
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

// streamOf names the stream or bucket a subject sagad publishes to lands
// in ("" for none it knows).
func streamOf(subject string) string {
	switch {
	case subject == IntakeSubject:
		return IntakeStream
	case strings.HasPrefix(subject, EventsPrefix):
		return EventsStream
	case strings.HasPrefix(subject, OutcomePrefix):
		return OutcomesStream
	case strings.HasPrefix(subject, "saga.phase."):
		return "SAGA_PHASE_" + strings.TrimPrefix(subject, "saga.phase.")
	}
	return jspub.TargetOf(subject)
}

// readCtx bounds one read (jspub.ReadCtx).
func readCtx(ctx context.Context, w *jspub.Writes) (context.Context, context.CancelFunc) {
	return jspub.ReadCtx(ctx, w)
}
