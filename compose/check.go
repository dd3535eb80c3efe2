package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/schemas"
)

// Finding is one problem of a document: in step Step (named Name), or in
// the document as a whole when Step is -1.
type Finding struct {
	Step int    `json:"step"`
	Name string `json:"name,omitempty"`
	capsule.Finding
}

func (f Finding) String() string {
	where := "document"
	if f.Step >= 0 {
		where = fmt.Sprintf("step %d %q", f.Step, f.Name)
	}
	var b strings.Builder
	b.WriteString(where)
	if f.Rule > 0 {
		fmt.Fprintf(&b, ": rule %d %s", f.Rule, f.Title)
	}
	if f.Field != "" {
		fmt.Fprintf(&b, ": %s", f.Field)
	}
	fmt.Fprintf(&b, ": %s", f.Message)
	return b.String()
}

func stepFinding(step int, name, field, format string, args ...any) Finding {
	return Finding{Step: step, Name: name, Finding: capsule.Finding{Field: field, Message: fmt.Sprintf(format, args...)}}
}

// DocError refuses a whole document: every finding, nothing started.
type DocError struct {
	Findings []Finding
}

func (e *DocError) Error() string {
	var b strings.Builder
	b.WriteString("composition refused, nothing started:")
	for _, f := range e.Findings {
		b.WriteString("\n  ")
		b.WriteString(f.String())
	}
	return b.String()
}

// schemaError turns a schema violation into findings, one per place,
// attributed to the step its pointer is under (/steps/<i>/...).
func schemaError(err error) *DocError {
	var ve *schemas.ValidationError
	if !errors.As(err, &ve) {
		return &DocError{Findings: []Finding{{Step: -1, Finding: capsule.Finding{Message: err.Error()}}}}
	}
	out := &DocError{}
	for _, d := range ve.Details {
		ptr, msg, _ := strings.Cut(d, ": ")
		f := Finding{Step: -1, Finding: capsule.Finding{Field: ptr, Message: msg}}
		if rest, ok := strings.CutPrefix(ptr, "/steps/"); ok {
			idx, _, _ := strings.Cut(rest, "/")
			if i, err := strconv.Atoi(idx); err == nil {
				f.Step = i
			}
		}
		out.Findings = append(out.Findings, f)
	}
	if len(out.Findings) == 0 {
		out.Findings = []Finding{{Step: -1, Finding: capsule.Finding{Message: err.Error()}}}
	}
	return out
}

// Shape judges what needs no configuration at all: the graph, then every
// step built as a capsule (under throwaway ids) against the capsule
// schema. sagactl runs it before sending a document; [Check] judges more.
func Shape(d *Doc) []Finding {
	if fs := d.Graph(); len(fs) > 0 {
		return fs
	}
	if fs := d.loopFindings(); len(fs) > 0 {
		return fs
	}
	ids, err := NewStepIDs(len(d.Steps))
	if err != nil {
		return []Finding{{Step: -1, Finding: capsule.Finding{Message: err.Error()}}}
	}
	capsules, _, err := d.Build(ids, 1)
	if err != nil {
		return []Finding{{Step: -1, Finding: capsule.Finding{Message: err.Error()}}}
	}
	var out []Finding
	for i, raw := range capsules {
		if err := schemas.Validate(schemas.Capsule, raw); err != nil {
			var ve *schemas.ValidationError
			if !errors.As(err, &ve) {
				out = append(out, stepFinding(i, d.Steps[i].Name, "", "not a capsule: %v", err))
				continue
			}
			out = append(out, stepFinding(i, d.Steps[i].Name, "", "not a capsule: %s", strings.Join(ve.Details, "; ")))
		}
	}
	return out
}

// offlineLocks answers "available" for every lock: availability is a
// runtime fact, judged when the step is received.
type offlineLocks struct{ phases.Locks }

func (offlineLocks) Available(context.Context, string, string) (bool, error) { return true, nil }

// Check judges a document before anything starts: the graph ([Doc.Graph]),
// then the verification loops, then every step's capsule as it would be built, by everything that needs
// no runtime fact: RECEPTION's checks but lock availability (size,
// schema, deadline, budget), PLANNING's definition of ready, and every
// absolute rule of the constitution under cfg (kinds and reviewers served,
// paths, secrets, scope, refs' schemes) but their live parts (rules 2, 19,
// 24). No findings means the document may start. A step's task.model is
// judged by no models config: see [CheckModels].
func Check(d *Doc, cfg rules.Config, now time.Time) []Finding {
	return CheckModels(d, cfg, executors.Models{}, now)
}

// CheckModels is [Check] with the models config a step's task.model is
// judged by (RECEPTION's model_not_allowed), sagad's own.
func CheckModels(d *Doc, cfg rules.Config, models executors.Models, now time.Time) []Finding {
	if fs := d.Graph(); len(fs) > 0 {
		return fs
	}
	var out []Finding
	if d.Deadline != nil && !d.Deadline.After(now) {
		out = append(out, Finding{Step: -1, Finding: capsule.Finding{Field: "deadline", Message: "the composition's deadline " + d.Deadline.UTC().Format(time.RFC3339) + " has passed"}})
	}
	out = append(out, d.loopFindings()...)
	for i, s := range d.Steps {
		if d.Budget != nil {
			var t struct {
				WaveID *string `json:"wave_id"`
			}
			if json.Unmarshal(s.tmpl, &t) == nil && t.WaveID != nil {
				out = append(out, stepFinding(i, s.Name, "wave_id", "a step of a composition with a budget joins the composition's wave: it names none of its own"))
			}
		}
	}
	ids, err := NewStepIDs(len(d.Steps))
	if err != nil {
		return append(out, Finding{Step: -1, Finding: capsule.Finding{Message: err.Error()}})
	}
	capsules, _, err := d.Build(ids, 1)
	if err != nil {
		return append(out, Finding{Step: -1, Finding: capsule.Finding{Message: err.Error()}})
	}
	cfg = cfg.WithDefaults()
	reg := executors.NewRegistry()
	reg.SetModels(models)
	env := &phases.Env{Locks: offlineLocks{}, Rules: cfg, Executors: reg, Now: func() time.Time { return now }}
	ctx := context.Background()
	for i, raw := range capsules {
		out = append(out, judgeStep(ctx, env, now, i, d.Steps[i].Name, raw)...)
	}
	if len(out) > 0 {
		return out
	}
	return d.laterRounds(ctx, env, ids, now)
}

// judgeStep judges step i's capsule raw by everything that needs no
// runtime fact (see [Check]).
func judgeStep(ctx context.Context, env *phases.Env, now time.Time, i int, name string, raw []byte) []Finding {
	var out []Finding
	add := func(fs []capsule.Finding, halt string) {
		if len(fs) == 0 && halt != "" {
			fs = []capsule.Finding{{Message: halt}}
		}
		for _, f := range fs {
			out = append(out, Finding{Step: i, Name: name, Finding: f})
		}
	}
	r := phases.Receive(ctx, env, raw, func(id string) string { return id })
	if r.Decision.Action == phases.Halt {
		add(r.Decision.Findings, r.Decision.Halt.String())
	}
	if r.Capsule == nil {
		return out
	}
	if missing := phases.MissingSpecFields(r.Capsule.Spec); len(missing) > 0 {
		dec := phases.Planning{}.Run(ctx, env, &phases.Input{Capsule: r.Capsule})
		add(dec.Findings, dec.Halt.String())
	}
	res := rules.Evaluate(ctx, rules.Input{Capsule: r.Capsule, Raw: raw, Config: env.Rules, Now: now})
	if len(res.Violated) > 0 {
		add(res.Findings, res.Halt().String())
	}
	return out
}

// laterRounds judges each loop step as its largest later round would be
// built (the most verifier findings at their longest, the verifier's
// artifact read, its own prior artifact named): a round RECEPTION or a rule would refuse must be found
// before round 1 starts, not once a loop is under way.
func (d *Doc) laterRounds(ctx context.Context, env *phases.Env, ids []string, now time.Time) []Finding {
	long := func(n int) string { return strings.Repeat("x", n) }
	worst := make([]capsule.Finding, capsule.MaxChainFindings)
	for i := range worst {
		worst[i] = capsule.Finding{Rule: 99, Title: long(capsule.MaxFindingField), Field: long(capsule.MaxFindingField),
			Message: long(capsule.MaxFindingMessage), Source: capsule.FindingSourceVerifier}
	}
	var out []Finding
	index := d.index()
	for _, l := range d.Loops {
		verifier := ids[index[l.Verifier]]
		for _, n := range l.Steps {
			i := index[n]
			raw, _, err := d.buildStep(i, ids, stepBuild{run: 1, wave: WaveID(ids), round: MaxRounds, findings: worst,
				refs: []string{"artifact:" + verifier + "/999"}, prior: "artifact:" + ids[i] + "/999"})
			if err != nil {
				return append(out, stepFinding(i, n, "", "%v", err))
			}
			for _, f := range judgeStep(ctx, env, now, i, n, raw) {
				f.Message = "in a later round (with the verifier's findings and artifact): " + f.Message
				out = append(out, f)
			}
		}
	}
	return out
}
