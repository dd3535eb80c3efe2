package compose

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// maxRunsScanned bounds the runs a lookup of the latest run reads.
const maxRunsScanned = 1000

// Find returns producer's composition id (producer nil: the only
// producer's), run run (0: the latest).
func Find(ctx context.Context, st *store.Store, id string, producer *string, run int) (*Record, error) {
	if st.Compositions == nil {
		return nil, fmt.Errorf("%w: no composition %s", store.ErrNotFound, id)
	}
	var p string
	if producer != nil {
		p = *producer
	} else {
		recs, err := producers(ctx, st, id, maxProducersListed)
		if err != nil {
			return nil, err
		}
		switch len(recs) {
		case 0:
			return nil, fmt.Errorf("%w: no composition %s", store.ErrNotFound, id)
		case 1:
			p = recs[0].Producer
		default:
			names := make([]string, len(recs))
			for i, r := range recs {
				names[i] = r.Producer
				if names[i] == "" {
					names[i] = "-"
				}
			}
			sort.Strings(names)
			return nil, fmt.Errorf("%w: composition %s exists for producers %s: name one", ErrAmbiguous, id, strings.Join(names, ", "))
		}
	}
	if run > 0 {
		return GetRun(ctx, st, id, p, run)
	}
	last, err := GetRun(ctx, st, id, p, 1)
	if err != nil {
		return nil, err
	}
	for n := 2; n <= maxRunsScanned; n++ {
		r, err := GetRun(ctx, st, id, p, n)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		last = r
	}
	return last, nil
}

// Listed is one run in a list of compositions.
type Listed struct {
	CompositionID string  `json:"composition_id"`
	Producer      string  `json:"producer,omitempty"`
	Run           int     `json:"run"`
	State         string  `json:"state"`
	Summary       Summary `json:"summary"`
	// CreatedAt is when the run was composed: lists show the newest first.
	CreatedAt time.Time `json:"created_at"`
}

// List lists up to limit composition runs, sorted by id, producer, run.
func List(ctx context.Context, st *store.Store, limit int) ([]Listed, error) {
	out := []Listed{}
	if st.Compositions == nil {
		return out, nil
	}
	recs, err := listRecords(ctx, st, limit)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		m := Manifest(r)
		out = append(out, Listed{CompositionID: m.CompositionID, Producer: m.Producer, Run: m.Run, State: m.State, Summary: m.Summary, CreatedAt: r.CreatedAt})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.CompositionID != b.CompositionID {
			return a.CompositionID < b.CompositionID
		}
		if a.Producer != b.Producer {
			return a.Producer < b.Producer
		}
		return a.Run < b.Run
	})
	return out, nil
}

// ErrEnded refuses a control of a run whose steps all ended.
var ErrEnded = errors.New("composition run ended")

// Canceller cancels one capsule (admin.Admin's Cancel).
type Canceller func(ctx context.Context, id, reason, by string) error

// Cancel cancels run rec: the record says cancelled (by, reason) with one
// compare-and-set, then every step not ended is cancelled, so none starts;
// the run ends, and sends its outcome, when the last step's end is
// recorded. Cancelling a cancelled run again cancels what is left.
func Cancel(ctx context.Context, st *store.Store, cancel Canceller, rec *Record, by, reason string) (*Record, error) {
	rec, err := apply(ctx, st, keyOf(rec), Event{Kind: KindCancelled, At: time.Now().UTC(), By: by, Reason: reason}, inputs(ctx, st))
	if err != nil {
		return nil, err
	}
	if err := finishRun(ctx, st, rec, time.Now().UTC(), nil); err != nil {
		return rec, err
	}
	var errs []error
	for _, i := range dependentsFirst(rec) {
		id := rec.Steps[i]
		if i < len(rec.Ended) && rec.Ended[i].State != "" && !cancelledUnpublished(rec, i) {
			continue
		}
		cp, _, err := st.Checkpoints.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue // not received yet: sagad publishes every step before it answers
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cp.Terminal() {
			continue
		}
		if err := cancel(ctx, id, "composition cancelled: "+reason, by); err != nil {
			// A step that ended meanwhile is refused: it is left as it ended.
			if cp, _, gerr := st.Checkpoints.Get(ctx, id); gerr == nil && cp.Terminal() {
				continue
			}
			errs = append(errs, fmt.Errorf("step %d: %w", i, err))
		}
	}
	return rec, errors.Join(errs...)
}

// dependentsFirst orders a run's steps so that every step comes before the
// steps it needs: a cancel then reaches a dependent before its need ends, and
// the dependent is cancelled rather than halted dependency_failed. Without
// recorded needs (a record written before they were kept, or a chain, whose
// step i needs i-1) it is the steps in reverse.
func dependentsFirst(rec *Record) []int {
	n := len(rec.Steps)
	order := make([]int, 0, n)
	if len(rec.Needs) != n {
		for i := n - 1; i >= 0; i-- {
			order = append(order, i)
		}
		return order
	}
	// Post-order over the needs gives needs before dependents; reversed,
	// dependents come first. The needs form no cycle (checked when the
	// document was taken); seen guards a forged record all the same.
	seen := make([]bool, n)
	var visit func(int)
	visit = func(i int) {
		if seen[i] {
			return
		}
		seen[i] = true
		for _, j := range rec.Needs[i] {
			if j >= 0 && j < n {
				visit(j)
			}
		}
		order = append(order, i)
	}
	for i := range n {
		visit(i)
	}
	slices.Reverse(order)
	return order
}

// stepState reads the live state of a step not ended in the record.
func stepState(ctx context.Context, st *store.Store, id string) (state string, received bool) {
	cp, _, err := st.Checkpoints.Get(ctx, id)
	if err != nil {
		return StateRunning, false
	}
	if cp.State.Status == capsule.Waiting || cp.State.Status == capsule.Paused {
		return string(cp.State.Status), true
	}
	return StateRunning, true
}

// Acting pauses or resumes one capsule (admin.Admin's Pause, Resume).
type Acting func(ctx context.Context, id, reason, by string) error

// Pause pauses run rec: the record says paused (by, reason), then every
// step not ended is paused: a running one where it is, one not started
// yet before it starts. A step waiting for its needs is not paused itself
// (the pipeline refuses to): its needs are, so it does not start either.
// Resume undoes it.
func Pause(ctx context.Context, st *store.Store, pause Acting, rec *Record, by, reason string) (*Record, error) {
	return control(ctx, st, rec, StatePaused, by, reason, func(ctx context.Context, id string, cp *capsule.Checkpoint) error {
		if cp.State.Status == capsule.Paused || cp.State.Status == capsule.Waiting {
			return nil
		}
		return pause(ctx, id, "composition paused: "+reason, by)
	})
}

// Resume resumes run rec: the record says running again, and every step
// paused is resumed, but a step held at its gate: that one waits for
// [Decide].
func Resume(ctx context.Context, st *store.Store, resume Acting, rec *Record, by, reason string) (*Record, error) {
	return control(ctx, st, rec, StateRunning, by, reason, func(ctx context.Context, id string, cp *capsule.Checkpoint) error {
		if cp.State.Status != capsule.Paused || (cp.State.Pause != nil && cp.State.Pause.Trigger == capsule.TriggerCompositionGate) {
			return nil
		}
		return resume(ctx, id, "composition resumed: "+reason, by)
	})
}

// control records state on run rec (refused once every step ended, or
// once cancelled), then acts on every step not ended.
func control(ctx context.Context, st *store.Store, rec *Record, state, by, reason string,
	act func(ctx context.Context, id string, cp *capsule.Checkpoint) error) (*Record, error) {
	kind := KindPaused
	if state == StateRunning {
		kind = KindResumed
	}
	rec, err := apply(ctx, st, keyOf(rec), Event{Kind: kind, At: time.Now().UTC(), By: by, Reason: reason}, inputs(ctx, st))
	if err != nil {
		return nil, err
	}
	var errs []error
	// A loop's round recorded while the run was paused is published now.
	if rec, err = settle(ctx, st, rec, time.Now().UTC()); err != nil {
		errs = append(errs, err)
	}
	for i, id := range rec.Steps {
		if i < len(rec.Ended) && rec.Ended[i].State != "" {
			continue
		}
		cp, _, err := st.Checkpoints.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cp.Terminal() {
			continue
		}
		if err := act(ctx, id, cp); err != nil {
			if cp, _, gerr := st.Checkpoints.Get(ctx, id); gerr == nil && cp.Terminal() {
				continue
			}
			errs = append(errs, fmt.Errorf("step %d: %w", i, err))
		}
	}
	return rec, errors.Join(errs...)
}

// Replaying replays one capsule and the capsules halted
// dependency_failed on it (admin.Admin's Replay with Dependents).
type Replaying func(ctx context.Context, id, reason, by string) error

// Replay runs the failed steps of an ended run again, and their
// dependents, as a new round of the run: every step that did not complete
// is replayed (a new run of its capsule, same id), the completed ones are
// kept. The record first forgets those steps' ends (remembering which
// capsule run ended, so a late delivery of that end is not taken for the
// new one) and counts the round; then each step that failed by itself
// (not dependency_failed) is replayed, its needs before it, with its
// dependents. The round ends, with its own outcome, like a run.
func Replay(ctx context.Context, st *store.Store, replay Replaying, rec *Record, by, reason string) (*Record, error) {
	if len(rec.Loops) > 0 {
		return nil, fmt.Errorf("%w: composition %s run %d has verification loops: compose the document again (an edited one is a new run)", ErrLoopReplay, rec.CompositionID, rec.RunOf())
	}
	runs := make(map[int]int) // step -> its capsule's run now
	for i, id := range rec.Steps {
		if i < len(rec.Ended) && rec.Ended[i].State != "" && rec.Ended[i].State != string(capsule.Completed) {
			cp, _, err := st.Checkpoints.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			runs[i] = cp.RunNumber()
		}
	}
	rec, err := apply(ctx, st, keyOf(rec), Event{Kind: KindReplayed, At: time.Now().UTC(), By: by, Reason: reason, Runs: runs}, inputs(ctx, st))
	if err != nil {
		return nil, err
	}
	order, err := topoOrder(ctx, st, rec)
	if err != nil {
		return rec, err
	}
	var errs []error
	for _, i := range order {
		if _, replayed := runs[i]; !replayed {
			continue
		}
		cp, _, err := st.Checkpoints.Get(ctx, rec.Steps[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cp.RunNumber() > runs[i] || !cp.Terminal() {
			continue // replayed already, as a dependent of another
		}
		if strings.HasPrefix(cp.State.HaltReason, string(capsule.CodeDependencyFailed)) {
			continue // replayed with the step it depends on
		}
		if err := replay(ctx, rec.Steps[i], "composition replayed: "+reason, by); err != nil {
			errs = append(errs, fmt.Errorf("step %d: %w", i, err))
		}
	}
	return rec, errors.Join(errs...)
}

// ErrLoopReplay refuses a replay of a run with verification loops.
var ErrLoopReplay = errors.New("composition run with loops not replayed")

// ErrLoopWaits refuses to resume a run whose loop waits for a person's
// decision ([Decide] on its verifier).
var ErrLoopWaits = errors.New("composition loop waits for a decision")

// runEnded reports whether every step of r ended and no loop waits for a
// person.
func runEnded(r *Record) bool { return r.AllEnded() && !waitingForPerson(r) }

// ErrNotEnded refuses a replay of a run still running.
var ErrNotEnded = errors.New("composition run not ended")

// topoOrder orders rec's steps so that every step comes after those it
// depends on (from the capsules' depends_on).
func topoOrder(ctx context.Context, st *store.Store, rec *Record) ([]int, error) {
	index := make(map[string]int, len(rec.Steps))
	for i, id := range rec.Steps {
		index[id] = i
	}
	deps := make([][]int, len(rec.Steps))
	for i, id := range rec.Steps {
		_, c, err := st.Raw(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i, err)
		}
		if c == nil {
			continue
		}
		for _, d := range c.DependsOn {
			if j, ok := index[d]; ok {
				deps[i] = append(deps[i], j)
			}
		}
	}
	var order []int
	seen := make([]int, len(rec.Steps)) // 0 new, 1 visiting, 2 done
	var visit func(i int)
	visit = func(i int) {
		if seen[i] != 0 {
			return
		}
		seen[i] = 1
		for _, j := range deps[i] {
			visit(j)
		}
		seen[i] = 2
		order = append(order, i)
	}
	for i := range rec.Steps {
		visit(i)
	}
	return order, nil
}

// Status is run rec's manifest, with the live state (waiting, paused) of
// steps not ended yet.
func Status(ctx context.Context, st *store.Store, rec *Record) Outcome {
	o := Manifest(rec)
	received := 0
	for i := range o.Steps {
		switch {
		case o.Steps[i].ExitCode != nil:
			received++
		case o.Steps[i].State != StepHeld:
			var ok bool
			o.Steps[i].State, ok = stepState(ctx, st, o.Steps[i].CapsuleID)
			if ok {
				received++
			}
		}
	}
	o.Received = &received
	return o
}

// ErrNotGated refuses a decision on a step that is not waiting at its
// gate (no gate, not reached yet, or decided already).
var ErrNotGated = errors.New("composition step not waiting at its gate")

// Decide decides on run rec's step named step, held at its operator gate
// (trigger composition_gate): accept resumes it, so it starts; reject
// halts it operator_rejected (admin.Admin's Decide reject), and the steps
// needing it halt dependency_failed. A step not waiting at its gate is
// refused. On the verifier of a loop stopped for no_progress, it decides
// the loop instead (see decideLoop): accept takes it as passed, reject
// fails it.
func Decide(ctx context.Context, st *store.Store, resume, reject Acting, rec *Record, step string, accept bool, by, reason string) (*Record, error) {
	m := Manifest(rec)
	i := slices.IndexFunc(m.Steps, func(s StepOutcome) bool { return s.Name == step })
	if i < 0 {
		return nil, fmt.Errorf("%w: composition %s run %d has no step %q", store.ErrNotFound, rec.CompositionID, rec.RunOf(), step)
	}
	if rec.State == StateCancelled || runEnded(rec) {
		return nil, fmt.Errorf("%w: composition %s run %d is %s", ErrEnded, rec.CompositionID, rec.RunOf(), rec.StateOf())
	}
	if k := slices.IndexFunc(rec.Loops, func(l LoopRun) bool { return l.Verifier() == i }); k >= 0 && rec.Loops[k].State != "" {
		return decideLoop(ctx, st, rec, k, accept, by, reason)
	}
	id := rec.Steps[i]
	cp, _, err := st.Checkpoints.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: step %s has not been received yet", ErrNotGated, step)
	}
	if err != nil {
		return nil, err
	}
	if cp.State.Status != capsule.Paused || cp.State.Pause == nil || cp.State.Pause.Trigger != capsule.TriggerCompositionGate {
		return nil, fmt.Errorf("%w: step %s is %s", ErrNotGated, step, cp.State.Status)
	}
	if accept {
		err = resume(ctx, id, "composition gate accepted: "+reason, by)
	} else {
		err = reject(ctx, id, reason, by)
	}
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", step, err)
	}
	return rec, nil
}
