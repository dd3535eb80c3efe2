package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/status"
)

// encodeFunc writes v whole in one structured format (-o json, -o yaml).
type encodeFunc func(w io.Writer, v any) error

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeYAML writes v as YAML with the keys, order and values of its JSON:
// v is encoded as JSON (so json tags, omitempty and MarshalJSON apply), read
// back as a YAML node tree (JSON is YAML) and written in block style. The
// node keeps each scalar's tag, so a string such as "123" or "true" stays a
// quoted string.
func writeYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	blockStyle(&doc)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle drops the flow and quoting styles a node tree read from JSON
// carries, letting the encoder choose block style and quote only where a
// scalar would otherwise read as another type. Empty collections stay in
// flow style ([] and {}), the only way to write them.
func blockStyle(n *yaml.Node) {
	if (n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode) && len(n.Content) == 0 {
		n.Style = yaml.FlowStyle
	} else {
		n.Style = 0
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// listTable is table(w) for the list-like commands (list, history,
// pending, phase list, cost, composition list, wave list): with
// --no-headers their first line, the header, is left out (the columns
// keep the width the header gave them).
func (g *globals) listTable(w io.Writer) *tabwriter.Writer {
	if g.noHeaders {
		w = &skipFirstLine{w: w}
	}
	return table(w)
}

// skipFirstLine passes on what is written to it after the first newline.
type skipFirstLine struct {
	w       io.Writer
	skipped bool
}

func (s *skipFirstLine) Write(p []byte) (int, error) {
	if s.skipped {
		return s.w.Write(p)
	}
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return len(p), nil
	}
	s.skipped = true
	if _, err := s.w.Write(p[i+1:]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// addNoHeaders declares --no-headers on a list-like command.
func addNoHeaders(cmd *cobra.Command, g *globals) {
	cmd.Flags().BoolVar(&g.noHeaders, "no-headers", false, "leave the table's header line out (for scripts)")
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// dash is [printable] s, or "-" when s is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

// printable escapes what capsule data must not put on an operator's
// terminal: C0 and C1 control characters and DEL (escape sequences can
// recolour, retitle or rewrite the screen, newlines and tabs forge table
// rows and columns), Unicode bidirectional overrides and isolates (text that
// displays as something else, "Trojan Source") and invalid UTF-8. They are
// written as Go escapes (\x1b, \n, \u202e, \xff); everything else is kept.
// Every table and text output passes each string that came from a capsule, a
// checkpoint or an event through it; -o json needs no such care (the JSON
// encoder escapes control characters).
func printable(s string) string {
	if strings.IndexFunc(s, unprintable) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[0])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[0])&0xf, 16))
		case unprintable(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}

// unprintable reports the runes [printable] escapes (as rules.CheckPath
// refuses them in paths).
func unprintable(r rune) bool {
	return unicode.IsControl(r) || '\u202a' <= r && r <= '\u202e' || '\u2066' <= r && r <= '\u2069'
}

// printables is [printable] of each of list.
func printables(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = printable(s)
	}
	return out
}

// pf is [printable] of a string-typed value (state, trigger, event kind).
func pf[S ~string](s S) string { return printable(string(s)) }

// printSaid prints what people said to the capsule, if anything.
func printSaid(w io.Writer, said []status.Said) error {
	if len(said) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nsaid:")
	tw := table(w)
	fmt.Fprintln(tw, "  AT\tKIND\tBY\tCYCLE\tTEXT")
	for _, x := range said {
		cycle := "-"
		if x.Cycle > 0 {
			cycle = strconv.Itoa(x.Cycle)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", ts(x.At), printable(x.Kind), dash(x.By), cycle, printable(strconv.Quote(x.Text)))
	}
	return tw.Flush()
}

// printStatus prints one capsule's status for people.
func printStatus(w io.Writer, s client.Status) error {
	if err := printStatusSummary(w, s); err != nil {
		return err
	}
	if len(s.Findings) > 0 {
		fmt.Fprintln(w, "\nfindings:")
		printFindings(w, s.Findings)
	}
	if err := printAttempts(w, s.Attempts); err != nil {
		return err
	}
	if err := printSaid(w, s.Said); err != nil {
		return err
	}
	return printStatusHistory(w, s)
}

// printStatusSummary writes the capsule's fields, one a line.
func printStatusSummary(w io.Writer, s client.Status) error {
	tw := table(w)
	fmt.Fprintf(tw, "capsule_id:\t%s\n", dash(s.CapsuleID))
	if s.Key != s.CapsuleID {
		fmt.Fprintf(tw, "key:\t%s\n", printable(s.Key))
	}
	fmt.Fprintf(tw, "state:\t%s\n", pf(s.State))
	fmt.Fprintf(tw, "run:\t%d\n", max(s.Run, 1))
	if s.AwaitingExternal {
		fmt.Fprintf(tw, "awaiting:\tthe result of accepted external work (no action needed)\n")
	}
	fmt.Fprintf(tw, "phase:\t%d %s\n", s.Phase, printable(s.PhaseName))
	fmt.Fprintf(tw, "cycles_used:\t%d\n", s.CyclesUsed)
	fmt.Fprintf(tw, "progress:\t%d%%\n", s.Progress)
	if s.WaitingOn != "" {
		fmt.Fprintf(tw, "waiting_on:\t%s %s\n", printable(s.WaitingOn), printable(strings.Join(s.Pending, ", ")))
	}
	if s.HaltReason != "" {
		fmt.Fprintf(tw, "halt_reason:\t%s\n", printable(s.HaltReason))
	}
	if p := s.Pause; p != nil {
		fmt.Fprintf(tw, "pause_trigger:\t%s\n", printable(string(p.Trigger)))
		if p.Reason != "" {
			fmt.Fprintf(tw, "pause_reason:\t%s\n", printable(p.Reason))
		}
		fmt.Fprintf(tw, "paused_by:\t%s at %s\n", dash(printable(p.By)), ts(p.At))
	}
	for _, q := range s.Questions {
		fmt.Fprintf(tw, "question:\t%s asks (query %s, %s ago): %s\n", dash(printable(q.Agent)), printable(q.ID),
			time.Since(q.At).Truncate(time.Second), printable(q.Prompt))
	}
	if c := s.Call; c != nil {
		writeCall(tw, c)
	}
	if s.Producer != "" {
		fmt.Fprintf(tw, "producer:\t%s\n", printable(s.Producer))
	}
	if s.Reviewer != "" {
		fmt.Fprintf(tw, "reviewer:\t%s\n", printable(s.Reviewer))
	}
	if s.Parent != "" {
		fmt.Fprintf(tw, "parent:\t%s (depth %d)\n", printable(s.Parent), s.Depth)
	}
	est := ""
	if s.BudgetUsed.Estimated {
		// An agent reported no usage: its tokens are sagad's estimate.
		est = " (estimated)"
	}
	fmt.Fprintf(tw, "budget_used:\t%d tokens%s, $%.4f\n", s.BudgetUsed.Tokens, est, s.BudgetUsed.Dollars)
	if len(s.Children) > 0 {
		more := ""
		if s.ChildrenMore > 0 {
			more = fmt.Sprintf(" (and %d more)", s.ChildrenMore)
		}
		fmt.Fprintf(tw, "children:\t%s%s\n", strings.Join(printables(s.Children), ", "), more)
		if u := s.ChildrenUsed; u != nil {
			fmt.Fprintf(tw, "children_used:\t%d tokens, $%.4f (counted against this capsule's caps)\n", u.Tokens, u.Dollars)
		}
	}
	if len(s.ArtifactRefs) > 0 {
		fmt.Fprintf(tw, "artifacts:\t%s\n", strings.Join(printables(s.ArtifactRefs), ", "))
	}
	fmt.Fprintf(tw, "trace_id:\t%s\n", printable(s.TraceID))
	if tid := tracing.TraceIDOfTraceparent(s.TraceParent); tid != "" && tid != s.TraceID {
		// The producer's trace_id is no W3C trace id, or its traceparent
		// header named another trace: say which one the spans are in.
		fmt.Fprintf(tw, "otel_trace_id:\t%s\n", tid)
	}
	if s.Constitution != "" {
		fmt.Fprintf(tw, "constitution:\t%s\n", printable(s.Constitution))
	}
	fmt.Fprintf(tw, "updated_at:\t%s\n", ts(s.UpdatedAt))
	return tw.Flush()
}

// printAttempts writes the failed agent calls, nothing when none failed.
func printAttempts(w io.Writer, attempts []capsule.FailedAttempt) error {
	if len(attempts) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nfailed attempts:")
	tw := table(w)
	fmt.Fprintln(tw, "  AT\tPHASE\tCYCLE\tATTEMPT\tEXIT\tDECISION\tERROR")
	for _, a := range attempts {
		exit := strconv.Itoa(a.ExitCode)
		if a.Timeout {
			exit = "timeout"
		}
		fmt.Fprintf(tw, "  %s\t%d %s\t%d\t%d\t%s\t%s\t%s\n", ts(a.At), a.Phase, a.Phase, a.Cycle, a.Attempt, exit, printable(a.Decision), printable(clip(a.Error, 120)))
	}
	return tw.Flush()
}

// printStatusHistory writes the capsule's transitions, with their run
// when it was replayed.
func printStatusHistory(w io.Writer, s client.Status) error {
	fmt.Fprintln(w, "\nhistory:")
	tw := table(w)
	if s.Run > 1 {
		// A replayed capsule: every run's transitions, each with its run.
		fmt.Fprintln(tw, "  AT\tRUN\tPHASE\tCYCLE\tOUTCOME\tDETAIL")
		for _, h := range s.History {
			fmt.Fprintf(tw, "  %s\t%d\t%d %s\t%d\t%s\t%s\n", ts(h.At), max(h.Run, 1), h.Phase, printable(h.PhaseName), h.Cycle, printable(h.Outcome), printable(h.Detail))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "  AT\tPHASE\tCYCLE\tOUTCOME\tDETAIL")
	for _, h := range s.History {
		fmt.Fprintf(tw, "  %s\t%d %s\t%d\t%s\t%s\n", ts(h.At), h.Phase, printable(h.PhaseName), h.Cycle, printable(h.Outcome), printable(h.Detail))
	}
	return tw.Flush()
}

func printFindings(w io.Writer, fs []capsule.Finding) {
	tw := table(w)
	fmt.Fprintln(tw, "  RULE\tFIELD\tMESSAGE")
	for _, f := range fs {
		rule := "-"
		if f.Rule != 0 {
			rule = fmt.Sprint(f.Rule)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", rule, dash(f.Field), printable(f.Message))
	}
	_ = tw.Flush()
}

// clip shortens s to at most n runes, marking the cut with an ellipsis, so
// one long diagnostic does not stretch a table.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// writeCall writes the agent call running for the capsule, as its stream
// shows it so far (saga.admin.status's "call"; only the sagad that runs
// it knows it).
func writeCall(tw io.Writer, c *client.Call) {
	last := "no chunk yet"
	if !c.LastChunk.IsZero() {
		last = fmt.Sprintf("last chunk %.1fs ago", c.LastChunkAgeSecs)
	}
	state := "running"
	if c.Done {
		state = "ended, being recorded"
	}
	fmt.Fprintf(tw, "call:\t%s %d %s cycle %d to %s: %s, %d chunks, %d bytes, %s, since %s\n", state, c.Phase, printable(c.PhaseName),
		c.Cycle, dash(printable(c.Agent)), dash(printable(c.Subject)), c.Chunks, c.Bytes, last, ts(c.Started))
	if c.Text != "" {
		text := c.Text
		if len(text) > maxCallText {
			text = "…" + text[len(text)-maxCallText:]
		}
		fmt.Fprintf(tw, "streamed:\t%s\n", printable(strings.ReplaceAll(text, "\n", " ⏎ ")))
	}
}

// maxCallText is how much of a call's streamed text the table shows (its
// end); -o json has it all.
const maxCallText = 400
