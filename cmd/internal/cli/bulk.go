package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
)

// MaxBulk bounds the capsules one bulk command touches: a selection of
// more is refused (narrow it), never cut silently (the console's bound).
const MaxBulk = 1000

// listFilters are list's filters, which bulk selects with too.
type listFilters struct {
	state, wave, kind, haltReason, composition, producer, since string
}

func (f *listFilters) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.state, "state", "", "only capsules in this state")
	fs.StringVar(&f.wave, "wave", "", "only capsules of this wave")
	fs.StringVar(&f.kind, "kind", "", "only capsules of this task kind")
	fs.StringVar(&f.haltReason, "halt-reason", "", "only capsules whose halt reason starts with this (executor_failed, or the whole reason)")
	fs.StringVar(&f.composition, "composition", "", "only the steps of this composition or chain id (ID, or ID#RUN for one run)")
	fs.StringVar(&f.producer, "producer", "", "only capsules from this producer account")
	fs.StringVar(&f.since, "since", "", "only capsules created at or after: an RFC 3339 time, a date or a duration ago (24h, 7d)")
}

// any says a filter was given.
func (f *listFilters) any() bool {
	return *f != listFilters{}
}

// request is the list request of f, or a usage error.
func (f *listFilters) request() (adminsvc.ListRequest, error) {
	if st := capsule.State(f.state); f.state != "" && !st.Valid() {
		return adminsvc.ListRequest{}, exit(ExitUsage, fmt.Errorf("--state %q: want one of in_progress, paused, waiting_for_operator, waiting, completed, halted, cancelled", printable(f.state)))
	}
	r := adminsvc.ListRequest{State: f.state, Wave: f.wave, Kind: f.kind, HaltReason: f.haltReason, Composition: f.composition, Producer: f.producer}
	if f.since != "" {
		t, err := parseSince(f.since, time.Now())
		if err != nil {
			return r, exit(ExitUsage, err)
		}
		r.Since = t.UTC().Format(time.RFC3339Nano)
	}
	return r, nil
}

// bulkOptions are one bulk command's flags.
type bulkOptions struct {
	filters     listFilters
	dryRun, yes bool
	reason, by  string
	dependents  bool
	verb        string
}

// BulkResult is what a bulk command did (or, with --dry-run, would do) to
// one capsule.
type BulkResult struct {
	CapsuleID string        `json:"capsule_id"`
	Key       string        `json:"key"`
	State     capsule.State `json:"state"`
	// OK: the action was done (with --dry-run: it would be).
	OK bool `json:"ok"`
	// Result is the capsule's state after the action, or with --dry-run
	// what the action would do.
	Result string `json:"result,omitempty"`
	// WouldHalt, for a replay's dry run, is the halt reason the replay
	// would meet, or null.
	WouldHalt *string `json:"would_halt,omitempty"`
	Error     string  `json:"error,omitempty"`
}

func newBulk(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bulk cancel|replay|resume|accept [filters] [--dry-run] [--yes]",
		Short: "Cancel, replay, resume or accept many capsules: those list's filters select, or ids on stdin",
		Long: `Act on every capsule selected by list's filters (--state, --wave, --kind,
--halt-reason, --composition, --producer, --since) or, with no filter, on
the ids read from standard input (one or more per line; # starts a comment).
At most 1000 capsules: a larger selection is refused, narrow it. A
selection by filters leaves out a composition's capsules of a superseded
loop round or run (history of their run, not work to act on).

--dry-run changes nothing and prints what the action would do to each
capsule (for replay, whether it would halt again: sagad's replay preview).
Without --dry-run, sagactl asks for confirmation on a terminal; without a
terminal (ids on stdin, a script) it refuses unless --yes is given.

Each capsule is acted on by its own request, as the single commands do
(replay without --dependents: a bulk replay names what it replays). The
table lists each capsule's result; exit 0 when every action succeeded (or,
with --dry-run, would), 1 when any failed, 5 when the selection is empty.`,
	}
	for _, verb := range []string{admin.DecisionAccept, "cancel", "replay", "resume"} {
		cmd.AddCommand(newBulkVerb(g, verb))
	}
	return cmd
}

func newBulkVerb(g *globals, verb string) *cobra.Command {
	o := &bulkOptions{verb: verb}
	cmd := &cobra.Command{
		Use:   verb + " [filters] [--dry-run] [--yes]",
		Short: "Bulk " + verb + ": every capsule list's filters select, or the ids on stdin",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBulk(cmd, g, o)
		},
	}
	o.filters.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "change nothing: print what the action would do to each capsule")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask for confirmation (required without a terminal)")
	cmd.Flags().StringVar(&o.reason, "reason", "", "why (recorded with each action)")
	cmd.Flags().StringVar(&o.by, "by", "", "who (default $SAGA_OPERATOR or the login name)")
	if verb == "replay" {
		cmd.Flags().BoolVar(&o.dependents, "dependents", false, "also replay the capsules halted dependency_failed on each")
	}
	return cmd
}

func runBulk(cmd *cobra.Command, g *globals, o *bulkOptions) error {
	ids, fromStdin, err := bulkIDs(cmd, o)
	if err != nil {
		return err
	}
	nc, err := g.dialNATS()
	if err != nil {
		return err
	}
	defer nc.Close()
	a := adminsvc.NewClient(nc, adminsvc.ClientConfig{})
	selected, err := bulkSelect(cmd, g, a, o, ids)
	if err != nil {
		return err
	}
	if len(selected) == 0 {
		return exit(ExitRefused, errors.New("no capsule selected: nothing to do"))
	}
	if len(selected) > MaxBulk {
		return exit(ExitRefused, fmt.Errorf("%d capsules selected, more than %d: narrow the selection", len(selected), MaxBulk))
	}
	if !o.dryRun && !o.yes {
		if err := confirmBulk(cmd, o, len(selected), fromStdin); err != nil {
			return err
		}
	}
	results := make([]BulkResult, 0, len(selected))
	for _, s := range selected {
		ctx, cancel := contextWithTimeout(cmd, g)
		results = append(results, bulkOne(ctx, a, o, s))
		cancel()
	}
	if err := printBulk(cmd, g, o, results); err != nil {
		return err
	}
	failed := 0
	for _, r := range results {
		if !r.OK {
			failed++
		}
	}
	if failed > 0 {
		what := "failed"
		if o.dryRun {
			what = "would fail"
		}
		return exit(ExitFailure, fmt.Errorf("bulk %s: %d of %d %s", o.verb, failed, len(results), what))
	}
	return nil
}

// bulkIDs reads the ids from stdin when no filter is given.
func bulkIDs(cmd *cobra.Command, o *bulkOptions) (ids []string, fromStdin bool, err error) {
	if o.filters.any() {
		return nil, false, nil
	}
	in := cmd.InOrStdin()
	if isTerminal(in) {
		return nil, false, exit(ExitUsage, errors.New("select capsules with list's filters (--state, --wave, …) or pipe their ids on stdin"))
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := map[string]bool{}
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		for _, id := range strings.Fields(line) {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if len(ids) > MaxBulk {
			return nil, true, exit(ExitRefused, fmt.Errorf("more than %d ids on stdin: narrow the selection", MaxBulk))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, true, fmt.Errorf("read ids from stdin: %w", err)
	}
	return ids, true, nil
}

// bulkSelect is the capsules to act on: those of ids (each looked up; an
// unknown one is a result of its own), or every one the filters select.
func bulkSelect(cmd *cobra.Command, g *globals, a *adminsvc.Client, o *bulkOptions, ids []string) ([]client.Status, error) {
	if ids != nil || !o.filters.any() {
		out := make([]client.Status, 0, len(ids))
		for _, id := range ids {
			ctx, cancel := contextWithTimeout(cmd, g)
			s, err := a.Status(ctx, id)
			cancel()
			if err != nil {
				// Kept, to be reported as not found in the table.
				s = client.Status{CapsuleID: id}
			}
			out = append(out, s)
		}
		return out, nil
	}
	r, err := o.filters.request()
	if err != nil {
		return nil, err
	}
	// A superseded loop round's or run's step is its run's history, not
	// work to act on (sagactl pending leaves it out too).
	r.Current = true
	ctx, cancel := contextWithTimeout(cmd, g)
	defer cancel()
	list, _, err := listPages(ctx, a, r, MaxBulk+1)
	if err != nil {
		return nil, readErr(err)
	}
	return list, nil
}

// confirmBulk asks on the terminal, or refuses without one.
func confirmBulk(cmd *cobra.Command, o *bulkOptions, n int, fromStdin bool) error {
	in := cmd.InOrStdin()
	if fromStdin || !isTerminal(in) {
		return exit(ExitUsage, fmt.Errorf("bulk %s of %d capsules: no terminal to confirm on; check with --dry-run, then pass --yes", o.verb, n))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s %d capsules? [y/N] ", o.verb, n)
	line, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
		return exit(ExitCancelled, fmt.Errorf("bulk %s: not confirmed, nothing done", o.verb))
	}
	return nil
}

// isTerminal says r is a character device (a person's terminal).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// bulkOne acts on one capsule (or, with --dry-run, judges what the action
// would do) and says how it went.
func bulkOne(ctx context.Context, a *adminsvc.Client, o *bulkOptions, s client.Status) BulkResult {
	r := BulkResult{CapsuleID: s.CapsuleID, Key: s.Key, State: s.State}
	if s.Key == "" {
		r.Error = "not found"
		return r
	}
	id := s.Key
	if o.dryRun {
		return bulkJudge(ctx, a, o, s, r)
	}
	by := operator(o.by)
	var after client.Status
	var err error
	switch o.verb {
	case "cancel":
		after, err = a.Cancel(ctx, adminsvc.CancelRequest{ID: id, Reason: o.reason, By: by})
	case "resume":
		after, err = a.Resume(ctx, adminsvc.ResumeRequest{ID: id, Reason: o.reason, By: by})
	case admin.DecisionAccept:
		after, err = a.Decide(ctx, adminsvc.DecideRequest{ID: id, Decision: admin.DecisionAccept, Rationale: o.reason, By: by})
	case "replay":
		deps := o.dependents
		var rep adminsvc.ReplayReply
		rep, err = a.Replay(ctx, adminsvc.ReplayRequest{ID: id, Reason: o.reason, By: by, Dependents: &deps, RequestID: nuid.Next()})
		after = rep.Capsule
	}
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.OK, r.Result = true, string(after.State)
	if o.verb == "replay" {
		r.Result = fmt.Sprintf("run %d %s", after.Run, after.State)
	}
	return r
}

// bulkJudge is a dry run's answer for one capsule: a replay asks sagad's
// preview; the other actions are judged by the capsule's state now, as
// sagad would judge them.
func bulkJudge(ctx context.Context, a *adminsvc.Client, o *bulkOptions, s client.Status, r BulkResult) BulkResult {
	refuse := func(why string) BulkResult {
		r.Error = fmt.Sprintf("would be refused: the capsule is %s (%s)", s.State, why)
		return r
	}
	switch o.verb {
	case "cancel":
		if s.State.Terminal() {
			return refuse("it has ended")
		}
	case "resume":
		if s.State != capsule.Paused {
			return refuse("only a paused capsule resumes")
		}
	case admin.DecisionAccept:
		if s.State != capsule.WaitingForOperator {
			return refuse("only a capsule waiting for an operator is accepted")
		}
	case "replay":
		deps := o.dependents
		p, err := a.PreviewReplay(ctx, adminsvc.ReplayRequest{ID: s.Key, Reason: o.reason, By: operator(o.by), Dependents: &deps})
		if err != nil {
			r.Error = err.Error()
			return r
		}
		r.OK, r.WouldHalt = true, p.WouldHalt
		r.Result = fmt.Sprintf("would run %d from %s", p.Run, p.FromName)
		return r
	}
	r.OK, r.Result = true, "would "+o.verb
	return r
}

// printBulk prints the per-capsule results: -o json the list, else a
// table and, for a replay's dry run, how many would halt again.
func printBulk(cmd *cobra.Command, g *globals, o *bulkOptions, results []BulkResult) error {
	if enc := g.encoder(); enc != nil {
		return enc(cmd.OutOrStdout(), results)
	}
	w := cmd.OutOrStdout()
	tw := table(w)
	head := "CAPSULE\tSTATE\tOK\tRESULT\tERROR"
	if o.dryRun && o.verb == "replay" {
		head = "CAPSULE\tSTATE\tOK\tRESULT\tWOULD_HALT\tERROR"
	}
	fmt.Fprintln(tw, head)
	halts := 0
	for _, r := range results {
		ok := "yes"
		if !r.OK {
			ok = "no"
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s", idOrKey(r.CapsuleID, r.Key), dash(string(r.State)), ok, dash(r.Result))
		if o.dryRun && o.verb == "replay" {
			wh := "-"
			if r.WouldHalt != nil {
				wh, halts = printable(*r.WouldHalt), halts+1
			}
			row += "\t" + wh
		}
		fmt.Fprintf(tw, "%s\t%s\n", row, dash(r.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.dryRun {
		fmt.Fprintf(w, "dry run: nothing was changed (%d capsules", len(results))
		if o.verb == "replay" {
			fmt.Fprintf(w, "; %d would halt again", halts)
		}
		fmt.Fprintln(w, ")")
	}
	return nil
}
