package capsule_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestTriggerTable holds the rows of the trigger table to what the code
// that reads them assumes.
func TestTriggerTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, triggerConsts(t), capsule.AllTriggers(), "every Trigger constant of triggers.go has a row, in the same order")
	seen, labels := map[capsule.Trigger]bool{}, map[string]bool{}
	operators := 0
	for _, i := range capsule.TriggerTable {
		require.False(t, seen[i.Trigger], "%s: one row", i.Trigger)
		seen[i.Trigger] = true
		require.NotEmpty(t, i.Metric, i.Trigger)
		require.False(t, labels[i.Metric], "%s: metric label %s taken", i.Trigger, i.Metric)
		labels[i.Metric] = true
		require.NotEmpty(t, i.Description, i.Trigger)
		require.Contains(t, []capsule.State{capsule.Paused, capsule.Waiting, capsule.WaitingForOperator}, i.State, i.Trigger)
		require.Contains(t, []capsule.Resumer{capsule.ResumerPerson, capsule.ResumerSweeper}, i.Resumer, i.Trigger)
		require.NotEmpty(t, i.Event, i.Trigger)
		require.Equal(t, i, i.Trigger.Info())
		require.True(t, i.Trigger.Known())
		// The sweeper resumes only what it watches.
		if i.Resumer == capsule.ResumerSweeper {
			require.NotEqual(t, capsule.WatchNone, i.Watch, "%s: resumed by the sweeper, which watches nothing", i.Trigger)
		}
		// The sweeper finds what it watches by its continuation.
		if i.Watch != capsule.WatchNone {
			require.True(t, i.Continuation, "%s: watched without a continuation", i.Trigger)
		}
		// A waiting capsule has spent nothing: a pause is refused, with why.
		// and so is one of a capsule whose agent waits for an answer.
		require.Equal(t, i.State == capsule.Waiting || i.CallRuns, i.PauseRefused != "", i.Trigger)
		// A question asked during a call is for a person, who answers it;
		// the call holds its locks meanwhile.
		if i.CallRuns {
			require.Equal(t, capsule.Paused, i.State, i.Trigger)
			require.Equal(t, capsule.ResumerPerson, i.Resumer, i.Trigger)
			require.True(t, i.KeepsLocks, i.Trigger)
			require.False(t, i.Once || i.Operator, i.Trigger)
		}
		// Once-only triggers are sagad's warnings of a running capsule.
		if i.Once {
			require.Equal(t, capsule.Paused, i.State, i.Trigger)
			require.False(t, i.Operator, i.Trigger)
		}
		if i.Operator {
			operators++
			require.Equal(t, capsule.Paused, i.State, i.Trigger)
			require.Equal(t, capsule.ResumerPerson, i.Resumer, i.Trigger)
		}
		if i.State == capsule.WaitingForOperator {
			require.Equal(t, capsule.EventWaiting, i.Event, i.Trigger)
		}
	}
	require.Equal(t, 1, operators, "one trigger a person sets (sagactl pause)")
	for _, tr := range capsule.Triggers {
		require.True(t, tr.Info().Continuation, "%s: a PIPELINE §5 trigger keeps its continuation", tr)
		require.Equal(t, capsule.Paused, tr.Info().State, tr)
	}
	require.False(t, capsule.Trigger("nope").Known())
	require.Equal(t, capsule.TriggerInfo{}, capsule.Trigger("nope").Info())
}

func TestParkedBy(t *testing.T) {
	t.Parallel()
	var st capsule.CheckpointState
	_, ok := st.ParkedBy()
	require.False(t, ok)
	st.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerWaveCapacity}
	i, ok := st.ParkedBy()
	require.True(t, ok)
	require.Equal(t, capsule.WatchWave, i.Watch)
	st.Pause.Trigger = "unknown"
	_, ok = st.ParkedBy()
	require.False(t, ok)
}

// triggerConsts reads the values of the Trigger constants declared in
// triggers.go, in their order, so that a constant without a row fails.
func triggerConsts(t *testing.T) []capsule.Trigger {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "triggers.go", nil, 0)
	require.NoError(t, err)
	var out []capsule.Trigger
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Trigger" {
				continue
			}
			for _, e := range v.Values {
				lit := e.(*ast.BasicLit)
				val, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out = append(out, capsule.Trigger(val))
			}
		}
	}
	require.NotEmpty(t, out)
	return out
}
