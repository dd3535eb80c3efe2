package console

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// TestHaltedFindingsAndCorrectedReplay: a capsule halted at AUTOMATED_GATES
// is a dead letter in the inbox; its page carries the findings with the
// rules' titles and the kept bytes; a corrected capsule the operator typed
// (unsealed) is sealed by the console and replayed from RECEPTION, and one
// that is not the same capsule is refused with the admin service's reason.
func TestHaltedFindingsAndCorrectedReplay(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	doc := capsuletest.New().Set("spec.approved_by", "agent-coder-1").Set("constraints.destructive", true)
	id := f.publish(t, doc)
	f.wait(t, id, capsule.Halted)

	var in Inbox
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
	require.Equal(t, 1, in.Counts["halted"])
	require.Len(t, in.Halted, 1)
	require.Equal(t, id, in.Halted[0].CapsuleID)
	require.Equal(t, "absolute_rules_violated:[4, 11]", in.Halted[0].HaltReason)

	// Rows carry their title and kind; the list counts every state.
	var iv InboxView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &iv))
	require.Equal(t, Label{Title: "Touch the README", Kind: "stub"}, iv.Labels[id])
	var lv ListView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules?state=completed", &lv))
	require.Zero(t, lv.Total)
	require.Equal(t, 1, lv.States[capsule.Halted])
	require.Equal(t, 0, lv.States[capsule.Completed])
	require.Len(t, lv.States, 7)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules", &lv))
	require.Equal(t, "Touch the README", lv.Labels[id].Title)

	var v CapsuleView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules/"+id, &v))
	var rulesSeen []int
	for _, fd := range v.Checkpoint.State.Findings {
		rulesSeen = append(rulesSeen, fd.Rule)
		require.NotEmpty(t, fd.Message)
	}
	require.Contains(t, rulesSeen, 4)
	require.Contains(t, rulesSeen, 11)
	require.Equal(t, "Independent spec approval", v.RuleTitles[4])
	require.NotEmpty(t, v.CapsuleRaw)

	// The editor's starting point: the kept bytes, edited.
	var edited map[string]any
	require.NoError(t, json.Unmarshal(v.CapsuleRaw, &edited))
	delete(edited, "integrity")
	edited["spec"].(map[string]any)["approved_by"] = "human-lead"
	edited["constraints"].(map[string]any)["destructive"] = false

	other := capsuletest.New()
	code, body := f.act(t, "replay", map[string]any{"id": id, "by": "dora", "capsule": other}, nil)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "the corrected capsule's id is")
	code, body = f.act(t, "replay", map[string]any{"id": id, "by": "dora", "capsule": "[1]"}, nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	two := 2
	code, body = f.act(t, "replay", map[string]any{"id": id, "by": "dora", "capsule": edited, "from_phase": two}, nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "from RECEPTION")

	code, body = f.act(t, "replay", map[string]any{"id": id, "by": "dora", "reason": "approved by a person", "capsule": edited}, nil)
	require.Equal(t, http.StatusOK, code, body)
	f.wait(t, id, capsule.Completed)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules/"+id, &v))
	var replayed bool
	for _, e := range v.Events {
		replayed = replayed || (e.Kind == capsule.EventReplayed && e.By == "dora")
	}
	require.True(t, replayed, "the replay is recorded with the operator's name")
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return f.console.Index().StateCounts()[capsule.Completed] == 1 && f.console.Index().StateCounts()[capsule.Halted] == 0
	}, "the counts follow the replay")
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", truncate("abc", 3))
	require.Equal(t, "ab…", truncate("abc", 2))
	require.Equal(t, "a…", truncate("aé", 2), "never inside a rune")
}

// TestCorrectedReplayRefusalNamesEveryFinding: a corrected capsule that
// would halt at RECEPTION is refused with all it must fix, not the first
// thing alone.
func TestCorrectedReplayRefusalNamesEveryFinding(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	doc := capsuletest.New().Set("spec.approved_by", "agent-coder-1").Set("constraints.destructive", true)
	id := f.publish(t, doc)
	f.wait(t, id, capsule.Halted)
	var in Inbox
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
	broken := capsuletest.New().Set("capsule_id", id).Delete("target").Delete("task.title")
	code, body := f.act(t, "replay", map[string]any{"id": id, "by": "dora", "capsule": broken}, nil)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "would halt at RECEPTION")
	require.Contains(t, body, "/target: required property missing")
	require.Contains(t, body, "/task/title: required property missing", "every finding, not only the first")
}

// TestLabelsRememberGoneBytes: a capsule whose bytes retention removed is
// remembered as having no label, not read again on every page.
func TestLabelsRememberGoneBytes(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	id := f.publish(t, capsuletest.New())
	f.wait(t, id, capsule.Completed)
	gone := &Row{Key: capsuletest.NewID()}
	kept := &Row{Key: id}
	var l labels
	got := l.of(context.Background(), f.st, []*Row{gone, kept})
	require.Equal(t, Label{}, got[gone.Key])
	require.Equal(t, Label{Title: "Touch the README", Kind: "stub"}, got[id])
	require.Len(t, l.m, 2, "both remembered")
	// A new run has its own label (a corrected capsule may change it).
	again := l.of(context.Background(), f.st, []*Row{{Key: id, Run: 2}})
	require.Equal(t, "Touch the README", again[id].Title)
	require.Len(t, l.m, 3)
}
