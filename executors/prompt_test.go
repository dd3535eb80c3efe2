package executors_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

func promptCapsule() *capsule.Capsule {
	return &capsule.Capsule{
		CapsuleID: "c1", Target: "repo/x",
		Task: capsule.Task{Kind: "write", Title: "Write the summary", Description: "Summarise the design."},
		Spec: capsule.Spec{ProblemStatement: "Nobody can read it.", AcceptanceCriteria: []string{"under 200 words", "names the phases"},
			DefinitionOfDone: "A reviewer approves it."},
		Constraints: capsule.Constraints{AllowedPaths: []string{"docs/"}, Network: capsule.Network{Mode: "none"}},
	}
}

func TestRenderExecutePromptCarriesTheWork(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	req := executors.Request{
		Capsule: promptCapsule(), Cycle: 2,
		Findings:         []capsule.Finding{{Message: "too long", Field: "body", Severity: "major"}},
		PriorArtifactRef: "artifact:c1/1",
		PriorArtifact:    &capsule.Artifact{Ref: "artifact:c1/1", Content: json.RawMessage(`"the first draft"`)},
		ContextArtifacts: []capsule.Artifact{{Ref: "artifact:c0/final", Content: json.RawMessage(`{"notes":1}`)}},
		OperatorAnswer:   &capsule.OperatorAnswer{Text: "use British spelling", By: "ana", At: at},
		PreviousFailure:  &executors.PreviousFailure{Attempt: 1, Error: "idle timeout", Timeout: true},
	}
	got, err := executors.RenderExecutePrompt(nil, req)
	require.NoError(t, err)
	for _, want := range []string{
		"# Write the summary", "Target: repo/x", "Summarise the design.", "Nobody can read it.",
		"- under 200 words", "- names the phases", "A reviewer approves it.", "Change only these paths: docs/",
		"No network access.", "## Context: artifact:c0/final", `{"notes":1}`, "[major] body: too long",
		"## Your previous artifact (artifact:c1/1)", "the first draft", "use British spelling", "(ana)",
		"attempt 1: idle timeout (timed out)", "a revision",
	} {
		require.Contains(t, got, want)
	}
}

func TestRenderExecutePromptFirstCycleIsPlain(t *testing.T) {
	got, err := executors.RenderExecutePrompt(nil, executors.Request{Capsule: promptCapsule(), Cycle: 1})
	require.NoError(t, err)
	for _, absent := range []string{"revision", "Findings", "previous artifact", "person's answer", "failed"} {
		require.NotContains(t, got, absent)
	}
}

func TestRenderReviewPromptAsksForTheVerdictObject(t *testing.T) {
	big := strings.Repeat("é", executors.DefaultInlineArtifactBytes)
	content, _ := json.Marshal(big)
	got, err := executors.RenderReviewPrompt(nil, executors.ReviewRequest{
		Capsule: promptCapsule(), Cycle: 1, Artifact: capsule.Artifact{Ref: "artifact:c1/1", Content: content},
	})
	require.NoError(t, err)
	require.Contains(t, got, `"verdict": "APPROVED" | "CHANGES_REQUESTED" | "REJECTED"`)
	require.Contains(t, got, "cut at")
	require.Less(t, len(got), executors.DefaultInlineArtifactBytes+4096)
}

func TestLoadPromptTemplate(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/good.tmpl"
	require.NoError(t, writeFile(good, "Do {{.Title}} for {{.CapsuleID}}"))
	tm, err := executors.LoadPromptTemplate(good, executors.KindExecute)
	require.NoError(t, err)
	got, err := executors.RenderExecutePrompt(tm, executors.Request{Capsule: promptCapsule()})
	require.NoError(t, err)
	require.Equal(t, "Do Write the summary for c1", got)

	bad := dir + "/bad.tmpl"
	require.NoError(t, writeFile(bad, "{{.Nope}}"))
	_, err = executors.LoadPromptTemplate(bad, executors.KindExecute)
	require.ErrorContains(t, err, "Nope")
	_, err = executors.LoadPromptTemplate(bad+".missing", executors.KindReview)
	require.Error(t, err)
	rv := dir + "/review.tmpl"
	require.NoError(t, writeFile(rv, "{{.Artifact.Text}}"))
	_, err = executors.LoadPromptTemplate(rv, executors.KindReview)
	require.NoError(t, err)
	_, err = executors.LoadPromptTemplate(rv, executors.KindExecute)
	require.Error(t, err, "an execute template has no artifact under review")
}

func TestParseVerdictText(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		verdict    capsule.Verdict
		findings   int
		err        string
	}{
		{"bare", `Looks fine. {"verdict": "APPROVED", "findings": []}`, capsule.Approved, 0, ""},
		{"fenced", "Review:\n```json\n{\"verdict\": \"CHANGES_REQUESTED\", \"findings\": [{\"message\": \"fix x\", \"severity\": \"major\"}]}\n```\n", capsule.ChangesRequested, 1, ""},
		{"last wins", `{"verdict":"REJECTED"} then {"verdict":"APPROVED"}`, capsule.Approved, 0, ""},
		{"trailing braces", `{"verdict":"APPROVED"} and a stray { brace`, capsule.Approved, 0, ""},
		{"nested finding object last", `{"verdict":"CHANGES_REQUESTED","findings":[{"message":"a"},{"message":"b"}]}`, capsule.ChangesRequested, 2, ""},
		{"none", "I approve.", "", 0, "no JSON object"},
		{"other objects only", `{"ok": true}`, "", 0, "no JSON object"},
		{"bad verdict", `{"verdict": "LGTM"}`, "", 0, `verdict "LGTM"`},
		{"empty message", `{"verdict": "REJECTED", "findings": [{"message": " "}]}`, "", 0, "findings[0]: message is required"},
		{"wrong type", `{"verdict": 3}`, "", 0, "the verdict object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, fs, err := executors.ParseVerdictText(tc.text)
			if tc.err != "" {
				require.ErrorIs(t, err, executors.ErrNoVerdict)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.verdict, v)
			require.Len(t, fs, tc.findings)
		})
	}
}

func TestParseVerdictTextBoundedOnHostileText(t *testing.T) {
	_, _, err := executors.ParseVerdictText(strings.Repeat(`{"a":`, 200_000))
	require.ErrorIs(t, err, executors.ErrNoVerdict)
}

func TestEstimateTokens(t *testing.T) {
	for in, want := range map[int]int64{0: 0, -1: 0, 1: 1, 4: 1, 5: 2, 4000: 1000} {
		require.Equal(t, want, executors.EstimateTokens(in), in)
	}
}

func FuzzParseVerdictText(f *testing.F) {
	f.Add(`{"verdict": "APPROVED", "findings": []}`)
	f.Add("```json\n{\"verdict\": \"CHANGES_REQUESTED\", \"findings\": [{\"message\": \"m\"}]}\n```")
	f.Add(`{"verdict": "x"} {`)
	f.Fuzz(func(t *testing.T, text string) {
		v, fs, err := executors.ParseVerdictText(text)
		if err != nil {
			if !errors.Is(err, executors.ErrNoVerdict) {
				t.Fatalf("error %v does not wrap ErrNoVerdict", err)
			}
			return
		}
		if !v.Valid() {
			t.Fatalf("verdict %q accepted", v)
		}
		for _, f := range fs {
			if strings.TrimSpace(f.Message) == "" {
				t.Fatal("finding without a message accepted")
			}
		}
	})
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
