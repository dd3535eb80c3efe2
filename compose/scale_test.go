package compose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/natstest"
)

// scaleSteps is a composition of compose.MaxSteps steps with a fan-out of
// fanOut: one draft needed by fanOut translations, each checked by a
// review of its own; the rest are merges of the reviews, and a last merge
// needs every merge.
func scaleSteps(fanOut int) []step {
	steps := []step{{name: "draft", kind: "produce"}}
	for i := range fanOut {
		steps = append(steps, step{name: fmt.Sprintf("tr-%03d", i), kind: "translate", needs: []string{"draft"}})
	}
	for i := range fanOut {
		steps = append(steps, step{name: fmt.Sprintf("rv-%03d", i), kind: "validate", needs: []string{fmt.Sprintf("tr-%03d", i)}})
	}
	var merges []string
	for i := 0; len(steps) < compose.MaxSteps-1; i++ {
		name := fmt.Sprintf("mg-%03d", i)
		steps = append(steps, step{name: name, kind: "validate",
			needs: []string{fmt.Sprintf("rv-%03d", (2*i)%fanOut), fmt.Sprintf("rv-%03d", (2*i+1)%fanOut)}})
		merges = append(merges, name)
	}
	return append(steps, step{name: "all", kind: "validate", needs: merges})
}

// TestCompositionScale: a 256-step composition with a fan-out of 100
// completes on an embedded server with stub executors, the last merge
// reads every merge's final artifact, and the run's real record stays far
// below the KV value limit (docs/COMPOSITIONS.md gives its size).
func TestCompositionScale(t *testing.T) {
	t.Parallel()
	steps := scaleSteps(100)
	f := setup(t)
	start := time.Now()
	r, err := f.composeAs(t, "alice", f.compositionDoc(t, "scale", steps, nil))
	require.NoError(t, err)
	require.Len(t, r.Steps, len(steps))

	// As long as the test binary may run, less a margin to report: the
	// run's 256 steps take a minute alone under the race detector, and
	// several under the whole suite's load on two cores (a fixed two
	// minutes failed there). What the run must do does not change.
	var rec *compose.Record
	seen := &lastSeen{"no record"}
	natstest.Eventually(t, scaleWait(t), 50*time.Millisecond, func() bool {
		got, err := compose.GetRun(context.Background(), f.st, "scale", "alice", 1)
		require.NoError(t, err)
		rec = got
		m := compose.Manifest(got)
		seen.s = fmt.Sprintf("%d of %d steps ended, %d unpublished (%s)", m.Summary.Passed+m.Summary.Failed, len(got.Steps), len(got.Unpublished), got.PublishError)
		return got.OutcomeSent
	}, "the composition never ended: %s", seen)
	m := compose.Manifest(rec)
	require.Equal(t, compose.StateCompleted, m.State)
	require.Equal(t, compose.Summary{Total: len(steps), Passed: len(steps)}, m.Summary)
	for _, s := range m.Steps {
		require.Equal(t, string(capsule.Completed), s.State, s.Name)
	}
	draft := r.Steps[0].CapsuleID
	for i, s := range r.Steps[1:101] {
		in := f.rec.inputsOf(s.CapsuleID)
		require.Len(t, in, 1, "translation %d", i)
		require.Equal(t, draft, in[0].CapsuleID, "translation %d reads the draft", i)
	}
	last := r.Steps[len(r.Steps)-1]
	require.Len(t, f.rec.inputsOf(last.CapsuleID), len(steps[len(steps)-1].needs))

	b, err := json.Marshal(rec)
	require.NoError(t, err)
	t.Logf("%d steps in %s; the run's record: %d bytes", len(steps), time.Since(start).Round(time.Millisecond), len(b))
	require.Less(t, len(b), 128<<10)
	require.Len(t, f.outcomes(t, "scale"), 1)
}

// scaleWait is how long the scale test waits for its run to end: until
// the test binary's deadline (go test -timeout) less a minute to report,
// ten minutes without one.
func scaleWait(t *testing.T) time.Duration {
	d, ok := t.Deadline()
	if !ok {
		return 10 * time.Minute
	}
	return max(time.Until(d)-time.Minute, 2*time.Minute)
}
