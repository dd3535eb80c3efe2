package compose

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/sagad/sagad/capsule"
)

// Verification loops (loops[] of a composition): a loop's steps and its
// verifier run as round 1; when the verifier does not pass (complete with
// its reviewer's APPROVED), sagad publishes the loop's steps and verifier
// again, under fresh ids, as round 2 with the verifier's findings; and so
// on up to max_rounds. The steps after a loop (needing any of its steps,
// directly or not) are held, unpublished, until it passes: they are built
// then on the last round's capsules, never on an earlier round's.

// MaxRounds bounds a loop's max_rounds (composition.schema.json).
const MaxRounds = 10

// Loop events on SAGA_EVENTS, beside the composition events.
const (
	// EventRoundStarted: a loop's verifier did not pass and its next
	// round was published.
	EventRoundStarted capsule.EventKind = "composition_round_started"
	// EventLoopEnded: a loop passed, failed (max_rounds), stopped for
	// no_progress, or a person accepted or rejected it.
	EventLoopEnded capsule.EventKind = "composition_loop_ended"
)

// loopFindings judges the document's loops: they name steps of the
// document, the verifier needs (directly or not) every loop step, every
// step between a loop step and the verifier is in the loop, and a step is
// in at most one loop. The graph must be sound ([Doc.Graph]).
func (d *Doc) loopFindings() []Finding {
	var out []Finding
	index := d.index()
	reach := d.reach()
	owner := make(map[int]int) // step -> its loop
	for k, l := range d.Loops {
		field := "loops[" + strconv.Itoa(k) + "]"
		doc := func(f, format string, args ...any) {
			out = append(out, Finding{Step: -1, Finding: capsule.Finding{Field: field + f, Message: fmt.Sprintf(format, args...)}})
		}
		v, ok := index[l.Verifier]
		if !ok {
			doc(".verifier", "verifier %q: no step has that name", l.Verifier)
			continue
		}
		set := []int{}
		for j, n := range l.Steps {
			i, ok := index[n]
			switch {
			case !ok:
				doc(".steps["+strconv.Itoa(j)+"]", "step %q: no step has that name", n)
			case i == v:
				out = append(out, stepFinding(i, n, field+".steps", "the verifier is not one of its loop's steps"))
			case slices.Contains(set, i):
				out = append(out, stepFinding(i, n, field+".steps", "named twice in the loop"))
			case !reach[v][i]:
				out = append(out, stepFinding(i, n, field+".steps", "verifier %q does not need it, directly or not: its round would not be verified", l.Verifier))
			default:
				set = append(set, i)
			}
		}
		set = append(set, v)
		for _, i := range set {
			if o, taken := owner[i]; taken {
				out = append(out, stepFinding(i, d.Steps[i].Name, field, "already in loops[%d]: a step is in at most one loop", o))
				continue
			}
			owner[i] = k
		}
		for x := range d.Steps {
			if slices.Contains(set, x) || !reach[v][x] {
				continue
			}
			if slices.ContainsFunc(set, func(i int) bool { return reach[x][i] }) {
				out = append(out, stepFinding(x, d.Steps[x].Name, field+".steps",
					"between the loop's steps and its verifier %q: name it in the loop's steps", l.Verifier))
			}
		}
	}
	return out
}

// reach[i][j] reports whether step i needs step j, directly or not.
func (d *Doc) reach() [][]bool {
	index := d.index()
	needs := make([][]int, len(d.Steps))
	for i, s := range d.Steps {
		for _, n := range s.Needs {
			needs[i] = append(needs[i], index[n])
		}
	}
	return reachOf(needs)
}

// reachOf is the transitive closure of needs (acyclic).
func reachOf(needs [][]int) [][]bool {
	n := len(needs)
	reach := make([][]bool, n)
	var visit func(i int)
	visit = func(i int) {
		if reach[i] != nil {
			return
		}
		reach[i] = make([]bool, n)
		for _, j := range needs[i] {
			if j < 0 || j >= n || j == i {
				continue
			}
			reach[i][j] = true
			visit(j)
			if reach[j] == nil {
				continue // on a cycle: only a forged record has one
			}
			for x, ok := range reach[j] {
				reach[i][x] = reach[i][x] || ok
			}
		}
	}
	for i := range needs {
		visit(i)
	}
	return reach
}

// planLoops is a new run's loops (round 1, under ids) and the steps held
// until a loop before them passes.
func (d *Doc) planLoops(ids []string) (loops []LoopRun, held []int) {
	if len(d.Loops) == 0 {
		return nil, nil
	}
	index := d.index()
	for _, l := range d.Loops {
		run := LoopRun{MaxRounds: l.MaxRounds, Round: 1}
		for _, n := range l.Steps {
			run.Steps = append(run.Steps, index[n])
		}
		run.Steps = append(run.Steps, index[l.Verifier])
		r := LoopRound{}
		for _, i := range run.Steps {
			r.IDs = append(r.IDs, ids[i])
		}
		run.Rounds = []LoopRound{r}
		loops = append(loops, run)
	}
	reach := d.reach()
	for x := range d.Steps {
		for _, l := range loops {
			if downstreamOf(reach, l.Steps, x) {
				held = append(held, x)
				break
			}
		}
	}
	return loops, held
}

// downstreamOf reports whether step x comes after the loop of steps set:
// not in it, and needing one of its steps, directly or not.
func downstreamOf(reach [][]bool, set []int, x int) bool {
	if slices.Contains(set, x) {
		return false
	}
	return slices.ContainsFunc(set, func(i int) bool { return reach[x][i] })
}

// recordReach is the transitive closure of rec's needs.
func recordReach(rec *Record) [][]bool {
	needs := rec.Needs
	if len(needs) != len(rec.Steps) {
		needs = make([][]int, len(rec.Steps))
	}
	return reachOf(needs)
}

// loopOf is the index of the loop step i is in, -1 for none.
func loopOf(rec *Record, i int) int {
	for k, l := range rec.Loops {
		if slices.Contains(l.Steps, i) {
			return k
		}
	}
	return -1
}

// waveOf is rec's wave: named after its first step's round-1 id, which a
// loop's later rounds do not change.
func waveOf(rec *Record) string {
	for _, l := range rec.Loops {
		if p := slices.Index(l.Steps, 0); p >= 0 {
			return WaveID([]string{l.Rounds[0].IDs[p]})
		}
	}
	return WaveID(rec.Steps)
}

// stalled reports whether loop l's last two rounds each found no fewer
// findings than the round before.
func stalled(l *LoopRun) bool {
	n := len(l.Rounds)
	if n < 3 {
		return false
	}
	a, b, c := l.Rounds[n-3], l.Rounds[n-2], l.Rounds[n-1]
	return b.Findings >= a.Findings && c.Findings >= b.Findings
}

// waitingForPerson reports whether a loop of rec stopped for no_progress.
func waitingForPerson(rec *Record) bool {
	return slices.ContainsFunc(rec.Loops, func(l LoopRun) bool { return l.State == LoopNoProgress })
}
