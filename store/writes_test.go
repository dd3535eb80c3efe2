package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
)

// TestWritesTargets: every write the store makes is reported under the
// stream or bucket it goes to, so that package health tells one refusing
// target from the others' successes.
func TestWritesTargets(t *testing.T) {
	t.Parallel()
	s := &Store{Checkpoints: &Checkpoints{}, Continuations: &Continuations{}, Artifacts: &Artifacts{}}
	s.setWrites(&jspub.Writes{})
	for subject, want := range map[string]string{
		IntakeSubject:                     IntakeStream,
		PhaseSubject(capsule.Planning):    PhaseStream(capsule.Planning),
		PhaseSubject(capsule.Handoff):     PhaseStream(capsule.Handoff),
		EventSubject("k"):                 EventsStream,
		OutcomeSubject(capsule.Completed): OutcomesStream,
		capsuleSubject("k"):               CapsulesBucket,
		"$KV." + CheckpointsBucket + ".k": "",
		"somewhere.else":                  "",
	} {
		require.Equal(t, want, s.writesFor(subject).Target, subject)
	}
	require.Equal(t, CheckpointsBucket, s.Checkpoints.w.Target)
	require.Equal(t, ContinuationsBucket, s.Continuations.w.Target)
	require.Equal(t, ArtifactsBucket, s.Artifacts.w.Target)
	require.Equal(t, ArtifactRecordsBucket, s.Artifacts.recordW.Target)
	require.Equal(t, CapsulesBucket, s.writesTo(CapsulesBucket).Target)
}
