package machine_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// TestResumeAnswersLog: each resume with an answer adds it to the
// checkpoint's answers log once: a request that finishes a resume in
// flight adds nothing, a blank answer nothing, and the log keeps the
// newest capsule.MaxAnswerLog.
func TestResumeAnswersLog(t *testing.T) {
	t.Parallel()
	answer := func(text string) *capsule.OperatorAnswer {
		return &capsule.OperatorAnswer{Text: text, By: "dana", At: t0}
	}
	cp := paused(capsule.TriggerOperatorManual, "")
	res, err := machine.Apply(cp, machine.RequestResume{From: capsule.Paused, Token: "t1", Answer: answer("licence is MIT")}, t0)
	require.NoError(t, err)
	require.Equal(t, []capsule.OperatorAnswer{*answer("licence is MIT")}, res.Checkpoint.State.Answers)

	// The same resume again (its token is in the checkpoint): no second entry.
	again, err := machine.Apply(res.Checkpoint, machine.RequestResume{From: capsule.Paused, Token: "t2", Answer: answer("licence is MIT")}, t0)
	require.NoError(t, err)
	require.Len(t, again.Checkpoint.State.Answers, 1)

	// Blank: nothing recorded.
	blank, err := machine.Apply(paused(capsule.TriggerOperatorManual, ""), machine.RequestResume{From: capsule.Paused, Token: "t3", Answer: answer("  ")}, t0)
	require.NoError(t, err)
	require.Empty(t, blank.Checkpoint.State.Answers)

	// Bounded: the newest MaxAnswerLog stay.
	st := capsule.CheckpointState{}
	for i := range capsule.MaxAnswerLog + 3 {
		st.RecordAnswer(capsule.OperatorAnswer{Text: fmt.Sprint(i)})
	}
	require.Len(t, st.Answers, capsule.MaxAnswerLog)
	require.Equal(t, "3", st.Answers[0].Text)
	require.Equal(t, fmt.Sprint(capsule.MaxAnswerLog+2), st.Answers[capsule.MaxAnswerLog-1].Text)
}
