package schemas_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// enumAt returns the enum of the member named key at the JSON path, as
// strings.
func enumAt(t *testing.T, file string, path ...string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var node any
	require.NoError(t, json.Unmarshal(raw, &node))
	for _, p := range path {
		obj, ok := node.(map[string]any)
		require.True(t, ok, "%s: %s is not an object", file, p)
		node, ok = obj[p]
		require.True(t, ok, "%s: no %s along %v", file, p, path)
	}
	list, ok := node.(map[string]any)["enum"].([]any)
	require.True(t, ok, "%s: no enum at %v", file, path)
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = v.(string)
	}
	return out
}

// triggersWhere lists the triggers of capsule.TriggerTable whose row keep
// says so, in the table's order.
func triggersWhere(keep func(capsule.TriggerInfo) bool) []string {
	var out []string
	for _, i := range capsule.TriggerTable {
		if keep(i) {
			out = append(out, string(i.Trigger))
		}
	}
	return out
}

// TestTriggerEnums holds every schema enum that lists triggers to
// capsule.TriggerTable: a trigger added to the table must be added there.
func TestTriggerEnums(t *testing.T) {
	t.Parallel()
	all := func(capsule.TriggerInfo) bool { return true }
	require.Equal(t, triggersWhere(all), enumAt(t, "checkpoint.schema.json", "$defs", "trigger"),
		"checkpoint.schema.json $defs.trigger: every trigger")
	require.Equal(t, triggersWhere(func(i capsule.TriggerInfo) bool { return i.Continuation }),
		enumAt(t, "continuation.schema.json", "properties", "trigger"),
		"continuation.schema.json trigger: the triggers that keep a continuation")
	require.Equal(t, triggersWhere(func(i capsule.TriggerInfo) bool { return i.State == capsule.Waiting }),
		enumAt(t, "admin/status-reply.schema.json", "properties", "waiting_on"),
		"status-reply waiting_on: the triggers of state waiting")

	// sagactl pending lists capsules in the states of the triggers a person
	// resumes, with the trigger they are parked with.
	item := []string{"properties", "items", "items", "properties"}
	states := enumAt(t, "admin/pending-reply.schema.json", append(item, "state")...)
	var want []string
	for _, i := range capsule.TriggerTable {
		if i.Resumer == capsule.ResumerPerson && !slices.Contains(want, string(i.State)) {
			want = append(want, string(i.State))
		}
	}
	require.ElementsMatch(t, want, states, "pending-reply state: the states of the triggers a person resumes")
	require.Equal(t, triggersWhere(func(i capsule.TriggerInfo) bool { return slices.Contains(states, string(i.State)) }),
		enumAt(t, "admin/pending-reply.schema.json", append(item, "trigger")...),
		"pending-reply trigger: the triggers of those states")
}

// triggerDoc is the page whose trigger table people read (it was the
// README's until the reference moved to docs/).
const triggerDoc = "../docs/CAPSULES.md"

// readmeTriggerHeader opens the trigger table of triggerDoc.
const readmeTriggerHeader = "| trigger | state | fires | resumed by | event | continuation | when |"

// triggerTableMarkdown renders capsule.TriggerTable as triggerDoc shows it.
func triggerTableMarkdown() string {
	var b strings.Builder
	b.WriteString(readmeTriggerHeader + "\n|---|---|---|---|---|---|---|\n")
	for _, i := range capsule.TriggerTable {
		fires := "every time"
		if i.Once {
			fires = "once"
		}
		by := "a person"
		if i.Resumer == capsule.ResumerSweeper {
			by = "the sweeper"
		}
		cont := "no"
		if i.Continuation {
			cont = "kept"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | `%s` | %s | %s |\n", i.Trigger, i.State, fires, by, i.Event, cont, i.Description)
	}
	return b.String()
}

// TestDocsTriggerTable holds the table of pause and wait triggers of
// triggerDoc to capsule.TriggerTable; on a difference it prints the table
// to paste.
func TestDocsTriggerTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(triggerDoc)
	require.NoError(t, err)
	readme := string(raw)
	start := strings.Index(readme, readmeTriggerHeader)
	require.GreaterOrEqual(t, start, 0, "%s has no trigger table; add:\n%s", triggerDoc, triggerTableMarkdown())
	got := readme[start:]
	if end := strings.Index(got, "\n\n"); end >= 0 {
		got = got[:end+1]
	}
	require.Equal(t, triggerTableMarkdown(), got, "the trigger table of %s differs from capsule.TriggerTable; want:\n%s", triggerDoc, triggerTableMarkdown())
}
