package executors

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/sagad/sagad/capsule"
)

// The prompt an agent or a model endpoint receives is text rendered from the
// capsule by a Go text/template: the defaults below are shipped (and
// documented in docs/AGENTS.md), an endpoint's prompt_template replaces
// them. Both agent (Agent Protocol for NATS) and model (OpenAI, Anthropic)
// endpoints render through these functions, so a capsule reads the same to
// every kind of agent.

//go:embed templates/execute.tmpl templates/review.tmpl
var templateFS embed.FS

// DefaultExecuteTemplate and DefaultReviewTemplate are the shipped prompt
// templates' sources.
var (
	DefaultExecuteTemplate = mustRead("templates/execute.tmpl")
	DefaultReviewTemplate  = mustRead("templates/review.tmpl")
)

var (
	defaultExecute = template.Must(parsePrompt("execute", DefaultExecuteTemplate))
	defaultReview  = template.Must(parsePrompt("review", DefaultReviewTemplate))
)

func mustRead(name string) string {
	b, err := templateFS.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func parsePrompt(name, src string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(src)
}

// LoadPromptTemplate reads and parses the template file at path for calls of
// kind, and renders it once against a sample so that a field the template
// names but the data lacks is refused at start rather than at a capsule's
// call.
func LoadPromptTemplate(path string, kind CallKind) (*template.Template, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := parsePrompt(string(kind), string(src))
	if err != nil {
		return nil, err
	}
	var sample any = samplePrompt()
	if kind == KindReview {
		sample = ReviewPromptData{PromptData: samplePrompt(), Artifact: PromptArtifact{Ref: "artifact:x/1", Text: "x"}}
	}
	if err := t.Execute(new(bytes.Buffer), sample); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func samplePrompt() PromptData {
	return PromptData{Kind: "k", Title: "t", Cycle: 1, AcceptanceCriteria: []string{"a"}, Constraints: []string{"c"}}
}

// PromptData is what an execute template renders: the capsule's work, and on
// a revision what the reviewer and people said about the previous cycle.
type PromptData struct {
	CapsuleID          string
	Kind               string
	Title              string
	Description        string
	ProblemStatement   string
	AcceptanceCriteria []string
	DefinitionOfDone   string
	Target             string
	// Constraints are the capsule's constraints as sentences.
	Constraints []string
	Cycle       int
	// Revision is true when the cycle revises a reviewed artifact.
	Revision bool
	Findings []capsule.Finding
	// Context are the capsule's context artifacts.
	Context []PromptArtifact
	// Prior is the artifact this revision revises; nil on a first cycle.
	Prior *PromptArtifact
	// Answer is the latest answer a person gave; nil when none.
	Answer *capsule.OperatorAnswer
	// PreviousFailure is, on a retry, what the previous attempt failed
	// with, as one line.
	PreviousFailure string
}

// ReviewPromptData is what a review template renders.
type ReviewPromptData struct {
	PromptData
	// Artifact is the artifact under review.
	Artifact PromptArtifact
}

// PromptArtifact is an artifact as a prompt shows it.
type PromptArtifact struct {
	Ref       string
	MediaType string
	// Text is the content: a JSON string's text, other JSON as it is; cut
	// at the inline limit with a note saying so.
	Text string
	// Size is the content's whole size in bytes.
	Size int
	// Truncated says Text holds only the first part of the content.
	Truncated bool
}

// NewPromptData builds an execute template's data from req.
func NewPromptData(req Request) PromptData {
	d := capsulePrompt(req.Capsule, req.Cycle)
	limit := inlineLimit(req.InlineBytes)
	d.Findings = req.Findings
	d.Revision = req.PriorArtifactRef != "" || len(req.Findings) > 0
	for _, a := range req.ContextArtifacts {
		d.Context = append(d.Context, promptArtifact(a, limit))
	}
	if req.PriorArtifact != nil {
		p := promptArtifact(*req.PriorArtifact, limit)
		if p.Ref == "" {
			p.Ref = req.PriorArtifactRef
		}
		d.Prior = &p
	}
	d.Answer = req.OperatorAnswer
	d.PreviousFailure = failureLine(req.PreviousFailure)
	return d
}

// NewReviewPromptData builds a review template's data from req.
func NewReviewPromptData(req ReviewRequest) ReviewPromptData {
	d := capsulePrompt(req.Capsule, req.Cycle)
	d.PreviousFailure = failureLine(req.PreviousFailure)
	return ReviewPromptData{PromptData: d, Artifact: promptArtifact(req.Artifact, DefaultInlineArtifactBytes)}
}

func capsulePrompt(c *capsule.Capsule, cycle int) PromptData {
	if c == nil {
		return PromptData{Cycle: cycle}
	}
	return PromptData{
		CapsuleID: c.CapsuleID, Kind: c.Task.Kind, Title: c.Task.Title, Description: c.Task.Description,
		ProblemStatement: c.Spec.ProblemStatement, AcceptanceCriteria: c.Spec.AcceptanceCriteria,
		DefinitionOfDone: c.Spec.DefinitionOfDone, Target: c.Target, Constraints: constraintLines(c.Constraints),
		Cycle: cycle,
	}
}

func constraintLines(c capsule.Constraints) []string {
	var out []string
	if len(c.AllowedPaths) > 0 {
		out = append(out, "Change only these paths: "+strings.Join(c.AllowedPaths, ", "))
	}
	if len(c.ForbiddenPaths) > 0 {
		out = append(out, "Never touch these paths: "+strings.Join(c.ForbiddenPaths, ", "))
	}
	switch c.Network.Mode {
	case "", "none":
		out = append(out, "No network access.")
	case "allowlist":
		out = append(out, "Network only to: "+strings.Join(c.Network.AllowHosts, ", "))
	default:
		out = append(out, "Network: "+c.Network.Mode)
	}
	if c.Destructive {
		out = append(out, "Destructive changes are allowed.")
	} else {
		out = append(out, "No destructive changes.")
	}
	return out
}

func failureLine(f *PreviousFailure) string {
	if f == nil {
		return ""
	}
	s := fmt.Sprintf("attempt %d: %s", f.Attempt, f.Error)
	if f.Timeout {
		s += " (timed out)"
	}
	return s
}

// promptArtifact shows a's content as text: a JSON string is unquoted,
// anything else kept as JSON; past limit bytes it is cut on a rune boundary
// and marked.
func promptArtifact(a capsule.Artifact, limit int64) PromptArtifact {
	p := PromptArtifact{Ref: a.Ref, MediaType: a.MediaType, Text: ArtifactText(a.Content), Size: len(a.Content)}
	if limit > 0 && int64(len(p.Text)) > limit {
		cut := int(limit)
		for cut > 0 && !utf8.RuneStart(p.Text[cut]) {
			cut--
		}
		p.Text = p.Text[:cut] + fmt.Sprintf("\n[… cut at %d of %d bytes; the whole artifact is %s]", cut, len(p.Text), a.Ref)
		p.Truncated = true
	}
	return p
}

// ArtifactText is an artifact's content as text: the string a JSON string
// holds, else the JSON itself.
func ArtifactText(content json.RawMessage) string {
	if len(content) > 0 && content[0] == '"' {
		var s string
		if json.Unmarshal(content, &s) == nil {
			return s
		}
	}
	return string(content)
}

// TextContent is an artifact's content for text an agent or a model
// returned: a JSON string (the artifact's media type says text/markdown).
func TextContent(text string) json.RawMessage {
	b, _ := json.Marshal(text)
	return b
}

// TextMediaType is the media type of an agent's or a model's artifact.
const TextMediaType = "text/markdown"

// RenderExecutePrompt renders req with t (nil: the default template).
func RenderExecutePrompt(t *template.Template, req Request) (string, error) {
	return render(cmpTemplate(t, defaultExecute), NewPromptData(req))
}

// RenderReviewPrompt renders req with t (nil: the default template).
func RenderReviewPrompt(t *template.Template, req ReviewRequest) (string, error) {
	return render(cmpTemplate(t, defaultReview), NewReviewPromptData(req))
}

func cmpTemplate(t, def *template.Template) *template.Template {
	if t == nil {
		return def
	}
	return t
}

func render(t *template.Template, data any) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("prompt template %s: %w", t.Name(), err)
	}
	return b.String(), nil
}

// EstimateTokens is the token count charged when an agent reports no usage:
// ceil(bytes / 4), the usual rule of thumb for English text, so that token
// caps still bind. Usage charged this way is marked estimated.
func EstimateTokens(bytes int) int64 {
	if bytes <= 0 {
		return 0
	}
	return int64((bytes + 3) / 4)
}

// ErrNoVerdict is wrapped by every error [ParseVerdictText] returns.
var ErrNoVerdict = errors.New("no usable verdict")

// maxVerdictScan bounds the work [ParseVerdictText] does on a hostile text:
// only its last 64 KiB are looked at, and at most 1,024 candidate objects.
const (
	maxVerdictScan       = 64 << 10
	maxVerdictCandidates = 1024
)

// ParseVerdictText finds a reviewer's verdict in free text: the last JSON
// object (bare or in a fenced block) with a "verdict" member. It must be
// {"verdict": "APPROVED"|"CHANGES_REQUESTED"|"REJECTED", "findings":
// [{"message", "field"?, "severity"?}]}; findings are capped as a worker's
// are. None, or a malformed one, is an error wrapping [ErrNoVerdict] that
// says what was wrong.
func ParseVerdictText(text string) (capsule.Verdict, []capsule.Finding, error) {
	if len(text) > maxVerdictScan {
		text = text[len(text)-maxVerdictScan:]
	}
	end := len(text)
	for tries := 0; tries < maxVerdictCandidates; tries++ {
		i := strings.LastIndexByte(text[:end], '{')
		if i < 0 {
			break
		}
		end = i
		raw, ok := firstObject(text[i:])
		if !ok || !hasMember(raw, "verdict") {
			continue
		}
		return DecodeVerdict(raw)
	}
	return "", nil, fmt.Errorf(`%w: the answer holds no JSON object with a "verdict" member`, ErrNoVerdict)
}

// firstObject decodes the one JSON value s starts with, if it is an object.
func firstObject(s string) (json.RawMessage, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	var raw json.RawMessage
	if dec.Decode(&raw) != nil || len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	return raw, true
}

func hasMember(raw json.RawMessage, name string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	_, ok := m[name]
	return ok
}

// DecodeVerdict decodes a verdict object (a model's tool call or JSON-schema
// answer, or what [ParseVerdictText] found); errors wrap [ErrNoVerdict].
func DecodeVerdict(raw []byte) (capsule.Verdict, []capsule.Finding, error) {
	var v struct {
		Verdict  string `json:"verdict"`
		Findings []struct {
			Message  string `json:"message"`
			Field    string `json:"field"`
			Severity string `json:"severity"`
		} `json:"findings"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", nil, fmt.Errorf("%w: the verdict object: %v", ErrNoVerdict, err)
	}
	verdict := capsule.Verdict(v.Verdict)
	if !verdict.Valid() {
		return "", nil, fmt.Errorf("%w: verdict %q: want APPROVED, CHANGES_REQUESTED or REJECTED", ErrNoVerdict, v.Verdict)
	}
	fs := make([]capsule.Finding, 0, len(v.Findings))
	for i, f := range v.Findings {
		if strings.TrimSpace(f.Message) == "" {
			return "", nil, fmt.Errorf("%w: findings[%d]: message is required", ErrNoVerdict, i)
		}
		fs = append(fs, capsule.Finding{Message: f.Message, Field: f.Field, Severity: f.Severity})
	}
	return verdict, capsule.CapFindings(fs, capsule.MaxFindings), nil
}
