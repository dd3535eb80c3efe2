package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/compose"
)

func newComposition(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "composition status|list|wait|cancel|pause|resume|replay|decide",
		Short: "Show, list, cancel, pause and resume compositions (sagactl compose) as wholes",
		Long: `A composition run is one record in sagad: its state (running, completed,
failed, partial, cancelled), each step's name, capsule id, state, exit code
(0 completed, 1 halted or cancelled), final artifact and spend, and a
summary {total, passed, failed, exit_code: 0 all passed, 1 failed, 12
partial}. Read and changed through sagad's admin service
(saga.admin.composition.*). Composition ids are per producer: when several
producers used one, name it with --producer; --run names a run (default:
the latest). cancel ends every step not ended, so none starts; pause
pauses every running step, and the steps waiting for them wait; resume
resumes the paused steps; replay runs an ended run's failed steps and
their dependents again (a new round of the run, completed steps kept);
decide accepts or rejects a step with gate "operator", which waits (in
sagactl pending) before anything is spent: accept starts it, reject
halts it operator_rejected and the steps needing it halt
dependency_failed. A verification loop stopped for no progress (the run
paused, reason no_progress) is decided on its verifier step: accept
takes the loop as passed and starts the steps after it, reject fails it.
wait blocks until the run ends (exit its summary exit code) or a person
must act (exit 3), 21 at --timeout. list is newest first. Every verb that
acts records --by, else $SAGA_OPERATOR, else the login name.
Exit 4 for an unknown composition, 5 when refused (a run that ended, or
was cancelled; resume while a loop waits for a decision; replay of a run
with loops), 6 when no sagad answers.`,
	}
	f := &compositionFlags{g: g}
	cmd.AddCommand(f.status(), f.list(), f.wait(), f.control("cancel", "Cancel a composition run: every step not ended is cancelled, none starts",
		func(a *adminsvc.Client) compositionCall { return a.CompositionCancel }),
		f.control("pause", "Pause a composition run: its running steps pause, the steps waiting for them wait",
			func(a *adminsvc.Client) compositionCall { return a.CompositionPause }),
		f.control("resume", "Resume a paused composition run: its paused steps go on",
			func(a *adminsvc.Client) compositionCall { return a.CompositionResume }),
		f.control("replay", "Replay an ended composition run's failed steps and their dependents, as a new round",
			func(a *adminsvc.Client) compositionCall { return a.CompositionReplay }),
		f.decide())
	return cmd
}

// compositionCall is one of the admin client's composition controls.
type compositionCall func(context.Context, adminsvc.CompositionCancelRequest) (compose.Outcome, error)

// compositionFlags are the flags the composition subcommands share.
type compositionFlags struct {
	g                    *globals
	producer, by, reason string
	run                  int
}

// request names the run args[0] is, with --producer and --run.
func (f *compositionFlags) request(cmd *cobra.Command, id string) adminsvc.CompositionRequest {
	r := adminsvc.CompositionRequest{CompositionID: id, Run: f.run}
	if cmd.Flags().Changed("producer") {
		p := f.producer
		if p == "-" {
			p = ""
		}
		r.Producer = &p
	}
	return r
}

// runs adds --producer and --run to c.
func (f *compositionFlags) runs(c *cobra.Command) *cobra.Command {
	c.Flags().StringVar(&f.producer, "producer", "", "whose composition, when several producers used the id (- for sagad's own)")
	c.Flags().IntVar(&f.run, "run", 0, "which run (default: the latest)")
	return c
}

// acts adds --by and --reason to c.
func (f *compositionFlags) acts(c *cobra.Command, by string) *cobra.Command {
	c.Flags().StringVar(&f.by, "by", "", by)
	c.Flags().StringVar(&f.reason, "reason", "", "why (recorded)")
	return f.runs(c)
}

// show prints a run as -o asks, or as a tree.
func (f *compositionFlags) show(cmd *cobra.Command, o compose.Outcome, err error) error {
	if err != nil {
		return adminErr(err)
	}
	if enc := f.g.encoder(); enc != nil {
		return enc(cmd.OutOrStdout(), o)
	}
	return printComposition(cmd.OutOrStdout(), o)
}

func (f *compositionFlags) status() *cobra.Command {
	return f.runs(&cobra.Command{
		Use:   "status ID",
		Short: "Show a composition run: its state, summary and every step",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, a, done, err := f.g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			o, err := a.CompositionStatus(ctx, f.request(cmd, args[0]))
			return f.show(cmd, o, err)
		},
	})
}

func (f *compositionFlags) control(use, short string, call func(*adminsvc.Client) compositionCall) *cobra.Command {
	return f.acts(&cobra.Command{
		Use:   use + " ID [--by WHO] [--reason TEXT]",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, a, done, err := f.g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			r := f.request(cmd, args[0])
			o, err := call(a)(ctx, adminsvc.CompositionCancelRequest{
				CompositionID: r.CompositionID, Producer: r.Producer, Run: r.Run, By: operator(f.by), Reason: f.reason,
			})
			return f.show(cmd, o, err)
		},
	}, "who acts (recorded; default $SAGA_OPERATOR or the login name)")
}

func (f *compositionFlags) decide() *cobra.Command {
	return f.acts(&cobra.Command{
		Use:   "decide ID STEP accept|reject [--by WHO] [--reason TEXT]",
		Short: "Decide on a step held at its operator gate (accept starts it, reject halts it and its dependents), or on the verifier of a loop stopped for no_progress",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[2] != adminsvc.GateAccept && args[2] != adminsvc.GateReject {
				return exit(ExitUsage, fmt.Errorf("decision %q: want accept or reject", args[2]))
			}
			ctx, a, done, err := f.g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			r := f.request(cmd, args[0])
			o, err := a.CompositionDecide(ctx, adminsvc.CompositionDecideRequest{
				CompositionID: r.CompositionID, Producer: r.Producer, Run: r.Run, Step: args[1], Decision: args[2], By: operator(f.by), Reason: f.reason,
			})
			return f.show(cmd, o, err)
		},
	}, "who decides (recorded; default $SAGA_OPERATOR or the login name)")
}

func (f *compositionFlags) list() *cobra.Command {
	var limit int
	var state string
	list := &cobra.Command{
		Use:   "list [--state S] [--producer P] [--limit N]",
		Short: "List composition runs, newest first: id, producer, run, state, summary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, a, done, err := f.g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			r := adminsvc.CompositionListRequest{Limit: limit, State: state}
			r.Producer = f.request(cmd, "").Producer
			l, err := a.CompositionList(ctx, r)
			if err != nil {
				return adminErr(err)
			}
			if enc := f.g.encoder(); enc != nil {
				return enc(cmd.OutOrStdout(), l)
			}
			tw := f.g.listTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "COMPOSITION\tPRODUCER\tRUN\tSTATE\tPASSED\tFAILED\tTOTAL\tEXIT\tCREATED")
			for _, c := range l.Compositions {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\n", printable(c.CompositionID), dash(printable(c.Producer)), c.Run, c.State,
					c.Summary.Passed, c.Summary.Failed, c.Summary.Total, c.Summary.ExitCode, c.CreatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "at most this many runs (default 100, at most 1000)")
	list.Flags().StringVar(&state, "state", "", "only runs in this state: running, paused, completed, failed, partial, cancelled")
	list.Flags().StringVar(&f.producer, "producer", "", "only this producer's runs (- for sagad's own)")
	addNoHeaders(list, f.g)
	return list
}

// printComposition prints a run as a tree: each step indented under the
// need it is drawn under (its first), so a fan-out reads as siblings; a
// step with several needs (a fan-in) says which others it waits for.
func printComposition(w io.Writer, o compose.Outcome) error {
	state := o.State
	if o.Reason != "" {
		state += " (" + printable(o.Reason) + ")"
	}
	fmt.Fprintf(w, "composition %s run %d: %s (%d of %d passed, %d failed, exit code %d)\n", printable(o.CompositionID), o.Run, state,
		o.Summary.Passed, o.Summary.Total, o.Summary.Failed, o.Summary.ExitCode)
	if o.Publishing != "" {
		fmt.Fprintf(w, "publishing: %s\n", printable(o.Publishing))
	}
	verifiers := verifierNotes(o.Loops)
	tw := table(w)
	fmt.Fprintln(tw, "STEP\tCAPSULE\tSTATE\tEXIT\tARTIFACT")
	for _, n := range compositionTree(o.Steps) {
		s := o.Steps[n.step]
		code := "-"
		if s.ExitCode != nil {
			code = fmt.Sprint(*s.ExitCode)
		}
		detail := s.Artifact
		if s.HaltReason != "" {
			detail = s.HaltReason
		}
		state := s.State
		if v, ok := verifiers[s.Name]; ok && (v.stopped || detail == "") {
			// A passed verifier keeps its artifact; a stopped one is the
			// loop's stop, not a step that failed.
			detail = v.note
			if v.stopped {
				state = "stopped"
			}
		}
		name := strings.Repeat("  ", n.depth) + printable(s.Name)
		if len(n.also) > 0 {
			also := make([]string, len(n.also))
			for i, a := range n.also {
				also[i] = printable(a)
			}
			name += " (+" + strings.Join(also, ",") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, s.CapsuleID, state, code, dash(printable(detail)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printLoops(w, o)
	return nil
}

// printLoops prints a run's verification loops, one line each, and what
// a person is asked when one stopped for no progress.
func printLoops(w io.Writer, o compose.Outcome) {
	for _, l := range o.Loops {
		counts := make([]string, 0, len(l.Rounds))
		for _, r := range l.Rounds {
			if r.Ended {
				counts = append(counts, fmt.Sprint(r.Findings))
			}
		}
		steps := make([]string, len(l.Steps))
		for i, s := range l.Steps {
			steps[i] = printable(s)
		}
		fmt.Fprintf(w, "loop %s verified by %s: %s, round %d of %d, findings per round [%s]\n", strings.Join(steps, ","), printable(l.Verifier),
			l.State, l.Round, l.MaxRounds, strings.Join(counts, " "))
		printRounds(w, l)
		if l.State == compose.LoopNoProgress {
			fmt.Fprintf(w, "  no progress: sagactl composition decide %s %s accept|reject --by WHO\n", printable(o.CompositionID), printable(l.Verifier))
		}
	}
}

// printRounds prints each round of loop l and its capsules, the loop's
// steps then its verifier: a round before the last is superseded, its
// capsules its run's history (pending and the inbox leave them out).
func printRounds(w io.Writer, l compose.LoopOutcome) {
	names := append(slices.Clone(l.Steps), l.Verifier)
	for i, r := range l.Rounds {
		ids := make([]string, 0, len(r.CapsuleIDs))
		for j, id := range r.CapsuleIDs {
			name := "?"
			if j < len(names) {
				name = names[j]
			}
			ids = append(ids, printable(name)+" "+printable(id))
		}
		var what string
		switch {
		case !r.Ended:
			what = "running"
		case r.Passed:
			what = "passed"
		default:
			what = fmt.Sprintf("%d findings", r.Findings)
		}
		if i < len(l.Rounds)-1 {
			what += ", superseded"
		}
		fmt.Fprintf(w, "  round %d: %s (%s)\n", r.Round, strings.Join(ids, ", "), what)
	}
}

// verifierNote is how a loop's verifier step is shown in the steps table.
type verifierNote struct {
	note string
	// stopped: the loop ended without passing (max_rounds, no_progress, a
	// person's reject): the verifier is the loop's stop, not a step that
	// failed or waits.
	stopped bool
}

// verifierNotes says, for each loop's verifier step, what the loop made
// of it, so a stopped loop's verifier reads as a stop.
func verifierNotes(loops []compose.LoopOutcome) map[string]verifierNote {
	out := make(map[string]verifierNote, len(loops))
	for _, l := range loops {
		var v verifierNote
		switch l.State {
		case compose.LoopPassed:
			v.note = fmt.Sprintf("verifier: passed in round %d", l.Round)
		case compose.LoopFailed:
			v = verifierNote{fmt.Sprintf("verifier: stopped after round %d (max_rounds)", l.Round), true}
		case compose.LoopNoProgress:
			v = verifierNote{fmt.Sprintf("verifier: stopped after round %d (no_progress, waits for a decision)", l.Round), true}
		case compose.LoopRejected:
			v = verifierNote{fmt.Sprintf("verifier: stopped after round %d (no_progress, rejected by %s)", l.Round, l.By), true}
		case compose.LoopAccepted:
			v.note = fmt.Sprintf("verifier: accepted after round %d (no_progress, by %s)", l.Round, l.By)
		default:
			v.note = fmt.Sprintf("verifier: round %d of %d", l.Round, l.MaxRounds)
		}
		out[l.Verifier] = v
	}
	return out
}

// treeLine is one line of a composition's tree: the step (an index into
// the outcome's steps), how deep it is drawn and its needs other than the
// one it is drawn under.
type treeLine struct {
	step  int
	depth int
	also  []string
}

// compositionTree orders steps depth first from the roots (steps needing
// none), in document order, each step once, under its first need. A step
// whose needs name no step shown (an old record, or a need out of the
// graph) is a root, so every step is printed exactly once.
func compositionTree(steps []compose.StepOutcome) []treeLine {
	index := make(map[string]int, len(steps))
	for i, s := range steps {
		if _, dup := index[s.Name]; !dup {
			index[s.Name] = i
		}
	}
	parent := make([]int, len(steps))
	children := make([][]int, len(steps))
	var roots []int
	for i, s := range steps {
		parent[i] = -1
		for _, n := range s.Needs {
			if j, ok := index[n]; ok && j != i {
				parent[i] = j
				break
			}
		}
		if parent[i] < 0 {
			roots = append(roots, i)
		} else {
			children[parent[i]] = append(children[parent[i]], i)
		}
	}
	out := make([]treeLine, 0, len(steps))
	seen := make([]bool, len(steps))
	var walk func(i, depth int)
	walk = func(i, depth int) {
		if seen[i] {
			return
		}
		seen[i] = true
		l := treeLine{step: i, depth: depth}
		for _, n := range steps[i].Needs {
			if j, ok := index[n]; ok && j != parent[i] && j != i {
				l.also = append(l.also, n)
			}
		}
		out = append(out, l)
		for _, c := range children[i] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	// A cycle of first needs (sagad refuses one; a forged record might
	// not) leaves steps unseen: print them flat rather than drop them.
	for i := range steps {
		if !seen[i] {
			walk(i, 0)
		}
	}
	return out
}
