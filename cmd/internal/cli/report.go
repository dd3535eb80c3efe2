package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/status"
)

// ReportData is everything `sagactl report` knows about one capsule; -o json
// prints it as is.
type ReportData struct {
	Checkpoint *capsule.Checkpoint `json:"checkpoint"`
	// Capsule is the capsule as received; nil when its bytes are not a
	// readable capsule (the key is then "x-<seq>").
	Capsule *capsule.Capsule `json:"capsule,omitempty"`
	// Events is the capsule's lifecycle event stream, oldest first.
	Events []capsule.Event `json:"events"`
	// Continuation is the capsule's current continuation, when paused.
	Continuation *capsule.Continuation `json:"continuation,omitempty"`
}

// reportCmd is `sagactl report`.
type reportCmd struct {
	admin *adminsvc.Client
	id    string
	// enc writes -o json or -o yaml; nil writes Markdown.
	enc encodeFunc
}

// Run loads the capsule's records and writes the report to out.
func (r *reportCmd) Run(ctx context.Context, out io.Writer) error {
	d, err := r.load(ctx)
	if err != nil {
		return err
	}
	if r.enc != nil {
		return r.enc(out, d)
	}
	return writeReport(out, d)
}

// load asks sagad for the records, then pages through the events.
func (r *reportCmd) load(ctx context.Context) (*ReportData, error) {
	rec, err := r.admin.Report(ctx, r.id)
	if err != nil {
		return nil, readErr(err)
	}
	if rec.Checkpoint == nil {
		return nil, fmt.Errorf("report %s: sagad sent no checkpoint", r.id)
	}
	d := &ReportData{Checkpoint: rec.Checkpoint, Capsule: rec.Capsule, Continuation: rec.Continuation}
	if d.Events, err = r.admin.AllHistory(ctx, rec.Checkpoint.Key); err != nil {
		return nil, readErr(err)
	}
	return d, nil
}

// mdw writes Markdown and remembers the first write error.
type mdw struct {
	w   io.Writer
	err error
}

func (m *mdw) f(format string, args ...any) {
	if m.err == nil {
		_, m.err = fmt.Fprintf(m.w, format, args...)
	}
}

// row writes one table row; cells are escaped.
func (m *mdw) row(cells ...string) {
	for i, c := range cells {
		cells[i] = mdCell(c)
	}
	m.f("| %s |\n", strings.Join(cells, " | "))
}

// mdCell makes s safe inside a Markdown table cell: no pipe or line break
// splits it, no control character reaches a terminal ([printable]).
func mdCell(s string) string {
	s = printable(strings.NewReplacer("|", `\|`, "\r\n", " ", "\n", " ", "\r", " ").Replace(s))
	if s == "" {
		return "-"
	}
	return s
}

// mdCode renders s as inline code, [printable], or "-".
func mdCode(s string) string {
	if s == "" {
		return "-"
	}
	return "`" + printable(strings.ReplaceAll(s, "`", "'")) + "`"
}

func mdTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func mdDuration(from, to time.Time) string {
	if from.IsZero() || to.IsZero() || to.Before(from) {
		return "-"
	}
	d := to.Sub(from)
	switch {
	case d < time.Millisecond:
		return d.String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func mdUsage(u capsule.Usage) string { return fmt.Sprintf("%d tokens, $%.4f", u.Tokens, u.Dollars) }

// writeReport renders d as a Markdown document.
func writeReport(w io.Writer, d *ReportData) error {
	m := &mdw{w: w}
	cp, st, c := d.Checkpoint, d.Checkpoint.State, d.Capsule
	id := cp.CapsuleID
	if id == "" {
		id = cp.Key
	}
	m.f("# Capsule report: %s\n\n", mdCode(id))

	m.f("## Summary\n\n")
	m.row("Field", "Value")
	m.f("|---|---|\n")
	if cp.Key != cp.CapsuleID {
		m.row("Key", mdCode(cp.Key))
	}
	if c != nil {
		m.row("Title", c.Task.Title)
		m.row("Task kind", mdCode(c.Task.Kind))
		m.row("Producer", mdCode(c.ProducerAgentID))
		reviewer := mdCode(c.Review.ReviewerAgentID)
		if strings.TrimSpace(c.Review.ReviewerAgentID) == "" {
			// Served by sagad's default_reviewer: the reviews name it.
			reviewer = "none declared"
			if n := len(st.Reviews); n > 0 {
				reviewer = mdCode(st.Reviews[n-1].ReviewerID) + " (sagad's default reviewer)"
			}
		}
		m.row("Reviewer", reviewer)
		m.row("Target", mdCode(c.Target))
		if c.WaveID != "" {
			m.row("Wave", mdCode(c.WaveID))
		}
		m.row("Deadline", mdTime(st.DeadlineIn(c.Deadline)))
	}
	m.row("Outcome", reportOutcome(cp))
	if cp.RunNumber() > 1 {
		// Cycles number on across runs; Rule 12 counts this run's.
		run := fmt.Sprintf("%d (replayed)", cp.RunNumber())
		if cp.CycleBase > 0 {
			run = fmt.Sprintf("%d (replayed; its cycles count on from cycle %d)", cp.RunNumber(), cp.CycleBase+1)
		}
		m.row("Run", run)
	}
	m.row("Phase", fmt.Sprintf("%d %s (progress %d %%)", st.Phase, st.Phase, st.Progress))
	cycles := fmt.Sprint(cp.RunCycle(st.Cycle))
	if c != nil {
		cycles += fmt.Sprintf(" of %d", c.CycleLimit())
	}
	if cp.CycleBase > 0 {
		// status's cycles_used and the idempotency keys count every run's.
		cycles += fmt.Sprintf(" in this run (cycle %d overall)", st.Cycle)
	}
	m.row("Cycles used", cycles)
	if a := st.Attempts; a != nil {
		step := capsule.Execution
		if a.Phase != 0 {
			step = a.Phase
		}
		m.row("Failed attempts", fmt.Sprintf("%d of %s cycle %d (failure policy); last: %s", a.Failed, step, a.Cycle, a.LastFailure.Error))
	}
	m.row("Trace id", mdCode(cp.TraceID))
	m.row("Created", mdTime(cp.CreatedAt))
	m.row("Updated", mdTime(cp.UpdatedAt))
	m.row("Elapsed", mdDuration(cp.CreatedAt, cp.UpdatedAt))

	writePhases(m, d)
	writeReviews(m, st.Reviews)
	writeRuleFindings(m, st.Findings)
	writeBudget(m, d)
	writeLocks(m, d)
	writeContinuations(m, d)
	writeSaid(m, d.Checkpoint)

	m.f("\n## Artifacts\n\n")
	if len(st.ArtifactRefs) == 0 {
		m.f("None.\n")
	}
	for _, ref := range st.ArtifactRefs {
		m.f("- %s\n", mdCode(ref))
	}

	m.f("\n## Timeline\n\n")
	if len(d.Events) == 0 {
		m.f("No lifecycle events (the event stream may have aged them out).\n")
	} else {
		m.row("At", "Event", "Phase", "Cycle", "Detail")
		m.f("|---|---|---|---|---|\n")
		for _, ev := range d.Events {
			detail := eventDetail(ev)
			switch n := len(ev.Findings); n {
			case 0:
			case 1:
				detail = strings.TrimSpace(detail + " (1 finding)")
			default:
				detail = strings.TrimSpace(fmt.Sprintf("%s (%d findings)", detail, n))
			}
			m.row(mdTime(ev.At), string(ev.Kind), fmt.Sprintf("%d %s", ev.Phase, ev.PhaseName), fmt.Sprint(ev.Cycle), detail)
		}
	}

	m.f("\n## Outcome\n\n%s\n", reportOutcomeSentence(cp))
	return m.err
}

// reportOutcome is the summary's one-cell outcome.
func reportOutcome(cp *capsule.Checkpoint) string {
	st := cp.State
	switch st.Status {
	case capsule.Halted:
		return "**halted**: " + mdCode(st.HaltReason)
	case capsule.Paused, capsule.WaitingForOperator:
		if st.Pause != nil {
			return fmt.Sprintf("**%s** (%s)", pf(st.Status), pf(st.Pause.Trigger))
		}
	}
	return "**" + pf(st.Status) + "**"
}

// reportOutcomeSentence says how the journey ended, or where it stands.
func reportOutcomeSentence(cp *capsule.Checkpoint) string {
	st := cp.State
	at := fmt.Sprintf("%s (cycle %d)", st.Phase, st.Cycle)
	switch st.Status {
	case capsule.Completed:
		return fmt.Sprintf("Completed at %s after %d cycle(s); artifacts: %d.", mdTime(cp.UpdatedAt), st.Cycle, len(st.ArtifactRefs))
	case capsule.Halted:
		return fmt.Sprintf("Halted at %s on %s with reason %s.", at, mdTime(cp.UpdatedAt), mdCode(st.HaltReason))
	case capsule.Cancelled:
		return fmt.Sprintf("Cancelled at %s on %s.", at, mdTime(cp.UpdatedAt))
	case capsule.Paused:
		return fmt.Sprintf("Paused at %s since %s; `sagactl resume` continues it.", at, mdTime(cp.UpdatedAt))
	case capsule.WaitingForOperator:
		return fmt.Sprintf("Waiting for an operator at %s since %s; `sagactl decide` accepts or revises it.", at, mdTime(cp.UpdatedAt))
	default:
		return fmt.Sprintf("In progress at %s; last change %s.", at, mdTime(cp.UpdatedAt))
	}
}

// writePhases: one row per recorded transition. A phase's start is its
// phase_started event, or the previous transition; its duration runs from
// there to the transition.
func writePhases(m *mdw, d *ReportData) {
	m.f("\n## Phases\n\n")
	cp := d.Checkpoint
	if len(cp.History) == 0 {
		m.f("No phase has completed yet.\n")
		return
	}
	type pc struct {
		p capsule.Phase
		c int
	}
	started := map[pc]time.Time{}
	for _, ev := range d.Events {
		if ev.Kind == capsule.EventPhaseStarted {
			started[pc{ev.Phase, ev.Cycle}] = ev.At
		}
	}
	m.row("Phase", "Cycle", "Started", "Ended", "Duration", "Outcome", "Detail")
	m.f("|---|---|---|---|---|---|---|\n")
	prev := cp.CreatedAt
	for _, t := range cp.History {
		start, ok := started[pc{t.Phase, t.Cycle}]
		if !ok {
			start = prev
		}
		if start.After(t.At) {
			start = time.Time{}
		}
		m.row(fmt.Sprintf("%d %s", t.Phase, t.PhaseName), fmt.Sprint(t.Cycle), mdTime(start), mdTime(t.At),
			mdDuration(start, t.At), t.Outcome, t.Detail)
		prev = t.At
	}
}

func writeReviews(m *mdw, reviews []capsule.ReviewEntry) {
	m.f("\n## Cycles and reviews\n\n")
	if len(reviews) == 0 {
		m.f("No review recorded.\n")
		return
	}
	for i, r := range reviews {
		if i > 0 {
			m.f("\n")
		}
		m.f("### Cycle %d: %s\n\n", r.Cycle, pf(r.Verdict))
		m.f("Reviewer %s at %s; usage %s.\n\n", mdCode(r.ReviewerID), mdTime(r.At), mdUsage(r.Usage))
		if len(r.Findings) == 0 {
			m.f("No findings.\n")
			continue
		}
		writeFindingTable(m, r.Findings)
	}
}

func writeRuleFindings(m *mdw, fs []capsule.Finding) {
	m.f("\n## Rule findings\n\n")
	if len(fs) == 0 {
		m.f("None.\n")
		return
	}
	writeFindingTable(m, fs)
}

func writeFindingTable(m *mdw, fs []capsule.Finding) {
	m.row("Rule", "Title", "Field", "Message")
	m.f("|---|---|---|---|\n")
	for _, f := range fs {
		rule := ""
		if f.Rule != 0 {
			rule = fmt.Sprint(f.Rule)
		}
		m.row(rule, f.Title, mdCode(f.Field), f.Message)
	}
}

func writeBudget(m *mdw, d *ReportData) {
	m.f("\n## Budget\n\n")
	st := d.Checkpoint.State
	used := st.BudgetUsed
	m.row("Budget", "Tokens", "Dollars")
	m.f("|---|---|---|\n")
	m.row("Used", fmt.Sprint(used.Tokens), fmt.Sprintf("$%.4f", used.Dollars))
	if d.Capsule != nil {
		caps := st.Caps(d.Capsule.Budget)
		m.row("Cap", fmt.Sprint(caps.Tokens), fmt.Sprintf("$%.4f", caps.Dollars))
		m.row("Used of cap", mdPercent(float64(used.Tokens), float64(caps.Tokens)), mdPercent(used.Dollars, caps.Dollars))
	}
	var reviews capsule.Usage
	for _, r := range st.Reviews {
		reviews = reviews.Add(r.Usage)
	}
	if len(st.Reviews) > 0 {
		m.f("\nOf which reviews: %s.\n", mdUsage(reviews))
	}
	if o := st.Overrides; o != nil && (o.Tokens > 0 || o.Dollars > 0) {
		m.f("\nCaps raised by an operator on resume.\n")
	}
}

func mdPercent(used, limit float64) string {
	if limit <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*used/limit)
}

func writeLocks(m *mdw, d *ReportData) {
	m.f("\n## Locks\n\n")
	st := d.Checkpoint.State
	if d.Capsule != nil {
		req := d.Capsule.Constraints.ResourceLocksRequired
		if len(req) == 0 {
			m.f("Required: none.\n")
		} else {
			m.f("Required: %s.\n", mdCodes(req))
		}
	}
	if len(st.LocksHeld) == 0 {
		m.f("Held now: none.\n")
	} else {
		m.f("Held now: %s.\n", mdCodes(st.LocksHeld))
	}
	if st.LockWaitSince != nil {
		m.f("Waiting for a lock held by another capsule since %s.\n", mdTime(*st.LockWaitSince))
	}
}

func mdCodes(list []string) string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = mdCode(s)
	}
	return strings.Join(out, ", ")
}

// writeContinuations: the continuation in force, then every pause, resume
// and operator decision of the event stream.
func writeContinuations(m *mdw, d *ReportData) {
	m.f("\n## Continuations\n\n")
	if c := d.Continuation; c != nil {
		m.f("Current: paused with trigger %s at %d %s (cycle %d) since %s", mdCode(string(c.Trigger)), c.Phase, printable(c.PhaseName), c.Cycle, mdTime(c.CreatedAt))
		if c.By != "" {
			m.f(" by %s", mdCode(c.By))
		}
		if c.Reason != "" {
			m.f(": %s", printable(c.Reason))
		}
		m.f(".\n\n")
	} else {
		m.f("Current: none.\n\n")
	}
	var rows []capsule.Event
	for _, ev := range d.Events {
		switch ev.Kind {
		case capsule.EventPaused, capsule.EventResumed, capsule.EventWaiting,
			capsule.EventOperatorAccepted, capsule.EventRevisionTriggered, capsule.EventOperatorRejected,
			capsule.EventDependencyWait, capsule.EventWaveWait, capsule.EventFamilyWait:
			rows = append(rows, ev)
		}
	}
	if len(rows) == 0 {
		m.f("No pauses, resumes or operator decisions.\n")
		return
	}
	m.row("At", "Event", "Phase", "Cycle", "By", "Detail")
	m.f("|---|---|---|---|---|---|\n")
	for _, ev := range rows {
		m.row(mdTime(ev.At), string(ev.Kind), fmt.Sprintf("%d %s", ev.Phase, ev.PhaseName), fmt.Sprint(ev.Cycle), ev.By, saidDetail(ev))
	}
}

// saidDetail is an event's detail with what the person said, when the
// detail does not already say it.
func saidDetail(ev capsule.Event) string {
	if ev.Said == "" || ev.Said == ev.Detail {
		return ev.Detail
	}
	return strings.TrimPrefix(ev.Detail+"; said: "+strconv.Quote(ev.Said), "; ")
}

// eventDetail is an event's detail with what was said and by whom.
func eventDetail(ev capsule.Event) string {
	detail := saidDetail(ev)
	if ev.By != "" {
		detail = strings.TrimSpace(detail + " (by " + ev.By + ")")
	}
	return detail
}

// writeSaid: every answer and decision rationale people gave, from the
// checkpoint (which keeps them whatever the event stream aged out).
func writeSaid(m *mdw, cp *capsule.Checkpoint) {
	m.f("\n## What people said\n\n")
	said := status.SaidOf(cp)
	if len(said) == 0 {
		m.f("Nothing: no answer, revise or reject.\n")
		return
	}
	m.row("At", "Kind", "By", "Cycle", "Text")
	m.f("|---|---|---|---|---|\n")
	for _, s := range said {
		cycle := "-"
		if s.Cycle > 0 {
			cycle = fmt.Sprint(s.Cycle)
		}
		m.row(mdTime(s.At), s.Kind, s.By, cycle, s.Text)
	}
}

func newReport(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "report ID [-f FILE]",
		Short: "Write a Markdown report of one capsule's journey",
		Long: `Write a consolidated, human-readable report (Markdown) of one capsule's
journey: summary and outcome, every phase with start, end and duration, the
review of each cycle with its findings, rule findings, budget used against
the caps, locks, continuations (pauses, resumes, operator decisions),
artifacts and the full event timeline. -o json prints the records the report
is built from. -f FILE writes to FILE instead of stdout.

Exit codes: 0 written, 1 failure, 2 usage, 4 capsule not found.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := contextWithTimeout(cmd, g)
			defer cancel()
			nc, err := g.dialNATS()
			if err != nil {
				return err
			}
			defer nc.Close()
			r := &reportCmd{admin: adminsvc.NewClient(nc, adminsvc.ClientConfig{}), id: args[0], enc: g.encoder()}
			if file == "" || file == "-" {
				return r.Run(ctx, cmd.OutOrStdout())
			}
			// Render first, so a failed lookup leaves no empty file behind.
			var buf strings.Builder
			if err := r.Run(ctx, &buf); err != nil {
				return err
			}
			if err := os.WriteFile(file, []byte(buf.String()), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", file, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write the report to FILE (default stdout)")
	return cmd
}
