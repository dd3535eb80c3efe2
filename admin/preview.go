package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
)

// Work is what a replay does with an agent's work of the earlier run.
const (
	// WorkRepeated: the agent is called again, as a new cycle.
	WorkRepeated = "repeated"
	// WorkReused: the earlier run's result (its last artifact) is taken
	// up; the agent is not called for it.
	WorkReused = "reused"
)

// ReplayPreview is what a replay would do, judged without doing it
// (sagactl replay --dry-run): nothing is written, staged or reserved.
// It is a judgement of the moment: locks, waves and dependencies may
// change before a replay runs.
type ReplayPreview struct {
	CapsuleID string `json:"capsule_id"`
	Key       string `json:"key"`
	// Run is the run the replay would start.
	Run int `json:"run"`
	// From is the phase the run would start at (RECEPTION with corrected
	// bytes), Cycle its first cycle.
	From     capsule.Phase `json:"from_phase"`
	FromName string        `json:"from_phase_name"`
	Cycle    int           `json:"cycle"`
	// WouldHalt is the halt reason the run's bytes would meet under the
	// rules, schemas, locks and budgets in force, or nil; Findings say why.
	WouldHalt *string           `json:"would_halt"`
	Findings  []capsule.Finding `json:"findings,omitempty"`
	// WouldWait says why the run would park before any agent call (its
	// dependencies, its wave's capacity, a composition gate), if it would.
	WouldWait string `json:"would_wait,omitempty"`
	// AgentCalls are the agent calls of the run's first cycle, in order;
	// a review that sends the work back adds cycles the preview cannot
	// foresee.
	AgentCalls []AgentCallPreview `json:"agent_calls"`
	// Locks are the resource locks EXECUTION would take.
	Locks []LockPreview `json:"locks"`
	// Reserve is the spend the run would reserve against its wave when
	// admitted (the capsule's caps in force); zero outside a wave or for a
	// run that starts after AUTOMATED_GATES.
	Reserve SpendReserve `json:"reserve"`
	// BudgetLeft is what the run may still spend: the caps in force less
	// what every run used (spend accumulates across runs).
	BudgetLeft capsule.Usage `json:"budget_left"`
	// Dependents are the capsules halted dependency_failed on this one
	// (transitively) that the replay would wake, with Dependents set.
	Dependents []DependentReplay `json:"dependents"`
}

// AgentCallPreview is one agent call a replay would make, or an earlier
// run's work it would take up instead.
type AgentCallPreview struct {
	Phase     capsule.Phase `json:"phase"`
	PhaseName string        `json:"phase_name"`
	// Agent is the executor's task kind or the reviewer's id.
	Agent string `json:"agent"`
	Cycle int    `json:"cycle"`
	// Work is WorkRepeated or WorkReused.
	Work string `json:"work"`
	// ArtifactRef is the earlier run's artifact a reused work takes up.
	ArtifactRef string `json:"artifact_ref,omitempty"`
}

// LockPreview is one lock a replay would take, and whether it is free
// for the capsule now.
type LockPreview struct {
	Path      string `json:"path"`
	Available bool   `json:"available"`
}

// SpendReserve is a reservation against a wave.
type SpendReserve struct {
	Wave    string  `json:"wave,omitempty"`
	Tokens  int64   `json:"tokens"`
	Dollars float64 `json:"dollars"`
}

// PreviewReplay judges what Replay would do with the same options and
// does none of it: it refuses what Replay refuses (the capsule's state, a
// later phase, a correction of another identity), and otherwise answers
// the run the replay would start and what it would meet. A corrected
// capsule RECEPTION would halt is answered with that halt, not refused.
func (a *Admin) PreviewReplay(ctx context.Context, id string, opts ReplayOptions) (ReplayPreview, error) {
	found, err := a.st.Checkpoints.Find(ctx, id)
	if err != nil {
		return ReplayPreview{}, err
	}
	latest, _, err := a.st.Checkpoints.GetLatest(ctx, found.Key, nil)
	if err != nil {
		return ReplayPreview{}, err
	}
	ev := machine.Replay{Token: "preview", By: opts.By, Reason: opts.Reason}
	if latest.ReplayToken == ev.Token {
		ev.Token += "-"
	}
	if opts.From != nil {
		ev.From, ev.FromSet = *opts.From, true
	}
	var c *capsule.Capsule
	var raw []byte
	var halt *capsule.HaltReason
	var findings []capsule.Finding
	if opts.Capsule != nil {
		probe := ev
		probe.Digest = "probe"
		if _, err := machine.Apply(latest, probe, a.now()); err != nil {
			return ReplayPreview{}, err
		}
		r := phases.Receive(ctx, a.env, opts.Capsule, func(string) string { return found.Key })
		switch r.Decision.Action {
		case phases.Retry:
			return ReplayPreview{}, fmt.Errorf("check the corrected capsule: %w", r.Decision.Err)
		case phases.Halt:
			h := r.Decision.Halt
			halt, findings = &h, r.Decision.Findings
			ev.Digest = r.Digest
		default:
			if err := a.checkIdentity(ctx, latest, found, r.Capsule); err != nil {
				return ReplayPreview{}, err
			}
			ev.Digest, c, raw = r.Digest, r.Capsule, opts.Capsule
		}
		if ev.Digest == "" {
			ev.Digest = "unreadable"
		}
	}
	res, err := machine.Apply(latest, ev, a.now())
	if err != nil {
		return ReplayPreview{}, err
	}
	next := res.Checkpoint
	p := ReplayPreview{CapsuleID: found.CapsuleID, Key: found.Key, Run: next.RunNumber(), From: next.State.Phase,
		FromName: next.State.Phase.String(), Cycle: next.State.Cycle,
		AgentCalls: []AgentCallPreview{}, Locks: []LockPreview{}, Dependents: []DependentReplay{}}
	if opts.Capsule != nil {
		p.From, p.FromName = capsule.Reception, capsule.Reception.String()
	}
	if halt == nil {
		if c == nil {
			if raw, c, err = a.runCapsule(ctx, latest); err != nil {
				return ReplayPreview{}, err
			}
		}
		if err := a.judgeRun(ctx, &p, next, c, raw); err != nil {
			return ReplayPreview{}, err
		}
	} else {
		s := halt.String()
		p.WouldHalt, p.Findings = &s, findings
	}
	if opts.Dependents {
		deps, err := a.dependentsOf(ctx, found)
		if err != nil {
			return ReplayPreview{}, err
		}
		p.Dependents = deps
	}
	return p, nil
}

// runCapsule reads the bytes the run would act on (the current run's,
// as sagad kept them), without keeping anything again as RunBytes does.
func (a *Admin) runCapsule(ctx context.Context, cp *capsule.Checkpoint) ([]byte, *capsule.Capsule, error) {
	raw, c, err := a.st.Raw(ctx, cp.Key)
	if err != nil {
		return nil, nil, err
	}
	if c == nil || (cp.Digest != "" && c.Integrity.SHA256 != cp.Digest) {
		return nil, nil, replayRefusal(cp, "the bytes of its last run are gone: replay it with --capsule FILE")
	}
	return raw, c, nil
}

// judgeRun fills in what the run next, on capsule c, would meet: the
// checks of the phases before EXECUTION that it runs (none of which write
// here), its wave, its deadline and budget, its locks and agent calls.
func (a *Admin) judgeRun(ctx context.Context, p *ReplayPreview, next *capsule.Checkpoint, c *capsule.Capsule, raw []byte) error {
	st := &next.State
	caps := st.Caps(c.Budget)
	p.BudgetLeft = capsule.Usage{Tokens: caps.Tokens - st.BudgetUsed.Tokens, Dollars: caps.Dollars - st.BudgetUsed.Dollars}
	in := &phases.Input{Capsule: c, Raw: raw, Checkpoint: next}
	d, err := a.checkPhases(ctx, p.From, in)
	if err != nil {
		return err
	}
	switch d.Action {
	case phases.Halt:
		s := d.Halt.String()
		p.WouldHalt, p.Findings = &s, d.Findings
		return nil
	case phases.Park:
		p.WouldWait = d.Reason
	}
	if c.WaveID != "" && p.From <= capsule.AutomatedGates {
		p.Reserve = SpendReserve{Wave: c.WaveID, Tokens: caps.Tokens, Dollars: caps.Dollars}
	}
	p.AgentCalls = agentCalls(a, p.From, next, c)
	if p.From <= capsule.Execution && a.env.Locks != nil {
		for _, path := range c.Constraints.ResourceLocksRequired {
			ok, err := a.env.Locks.Available(ctx, path, next.Key)
			if err != nil {
				return fmt.Errorf("preview the lock of %s: %w", path, err)
			}
			p.Locks = append(p.Locks, LockPreview{Path: path, Available: ok})
		}
	}
	if h, f := spendHalt(a, p, next, c, caps); h != nil {
		s := h.String()
		p.WouldHalt, p.Findings = &s, []capsule.Finding{f}
	}
	return nil
}

// checkPhases runs the judgement of each phase from from to
// AUTOMATED_GATES (RECEPTION was judged on the bytes already), and the
// wave's state; the first that does not advance answers. AUTOMATED_GATES
// is judged without its effects (phases.AutomatedGates.Check).
func (a *Admin) checkPhases(ctx context.Context, from capsule.Phase, in *phases.Input) (phases.Decision, error) {
	if a.env.Resolver == nil {
		// An Admin without the pipeline's environment (admin.Open) cannot
		// judge the phases; sagad's always can.
		return phases.Decision{}, errors.New("preview: this admin has no phase environment (it is not sagad's)")
	}
	steps := []struct {
		ph  capsule.Phase
		run func() phases.Decision
	}{
		{capsule.RealityAnchor, func() phases.Decision { return phases.RealityAnchor{}.Run(ctx, a.env, in) }},
		{capsule.Planning, func() phases.Decision { return phases.Planning{}.Run(ctx, a.env, in) }},
		{capsule.AutomatedGates, func() phases.Decision { return phases.AutomatedGates{}.Check(ctx, a.env, in) }},
		{capsule.AutomatedGates, func() phases.Decision { return a.checkWave(ctx, in) }},
	}
	for _, s := range steps {
		if s.ph < from {
			continue
		}
		d := s.run()
		switch d.Action {
		case phases.Retry:
			return d, fmt.Errorf("preview %s: %w", s.ph, d.Err)
		case phases.Halt, phases.Park:
			return d, nil
		}
	}
	return phases.AdvanceWith(), nil
}

// checkWave is the wave admission's judgement without its reservation:
// a closed wave halts, a full one makes the capsule wait.
func (a *Admin) checkWave(ctx context.Context, in *phases.Input) phases.Decision {
	c := in.Capsule
	if c.WaveID == "" || a.st.Budgets == nil {
		return phases.AdvanceWith()
	}
	w, ok, err := a.st.Budgets.Wave(ctx, c.WaveID)
	if err != nil {
		return phases.RetryLater(err)
	}
	caps := in.Checkpoint.State.Caps(c.Budget)
	switch {
	case !ok:
		return phases.AdvanceWith()
	case w.Closed:
		return phases.HaltWith(capsule.WaveClosed(c.WaveID), capsule.Finding{Rule: 19, Field: "wave_id", Message: fmt.Sprintf("wave %q is closed", c.WaveID)})
	case !w.Fits(caps):
		return phases.Decision{Action: phases.Park, Trigger: capsule.TriggerWaveCapacity, Reason: phases.WaveWaitReason(c.WaveID, w, caps)}
	}
	return phases.AdvanceWith()
}

// agentCalls are the calls of the run's first cycle: a run from EXECUTION
// or earlier calls the executor and the reviewer again; one from REVIEW
// takes up the earlier run's last artifact (machine.Replay) and calls the
// reviewer; one from HANDOFF calls no agent.
func agentCalls(a *Admin, from capsule.Phase, next *capsule.Checkpoint, c *capsule.Capsule) []AgentCallPreview {
	st := &next.State
	reviewer, _ := a.env.Rules.Reviewer(c)
	exec := AgentCallPreview{Phase: capsule.Execution, PhaseName: capsule.Execution.String(), Agent: c.Task.Kind, Cycle: st.Cycle, Work: WorkRepeated}
	review := AgentCallPreview{Phase: capsule.ReviewPhase, PhaseName: capsule.ReviewPhase.String(), Agent: reviewer, Cycle: st.Cycle, Work: WorkRepeated}
	switch {
	case from <= capsule.Execution:
		return []AgentCallPreview{exec, review}
	case st.Result != nil:
		exec.Work, exec.ArtifactRef = WorkReused, st.Result.ArtifactRef
		if from == capsule.Handoff {
			review.Work, review.ArtifactRef = WorkReused, st.Result.ArtifactRef
		}
		return []AgentCallPreview{exec, review}
	}
	return []AgentCallPreview{}
}

// spendHalt is the halt a run meets at its first agent call whatever the
// agent answers: a deadline passed (every attempt checks it first) or a
// cap already spent (the first charge crosses it).
func spendHalt(a *Admin, p *ReplayPreview, next *capsule.Checkpoint, c *capsule.Capsule, caps capsule.Budget) (*capsule.HaltReason, capsule.Finding) {
	var first *AgentCallPreview
	for i := range p.AgentCalls {
		if p.AgentCalls[i].Work == WorkRepeated {
			first = &p.AgentCalls[i]
			break
		}
	}
	if first == nil {
		return nil, capsule.Finding{}
	}
	if dl := next.State.DeadlineIn(c.Deadline); !dl.IsZero() && !a.now().Before(dl) {
		h := next.DeadlineHalt(first.Phase, c.Deadline)
		return &h, capsule.Finding{Field: "deadline", Message: fmt.Sprintf("the deadline %s has passed: resume with --deadline or --extend, or correct it", dl.Format("2006-01-02T15:04:05Z07:00"))}
	}
	used := next.State.BudgetUsed
	for _, cap := range []struct {
		name string
		over bool
	}{{"tokens", caps.Tokens > 0 && used.Tokens >= caps.Tokens}, {"dollars", caps.Dollars > 0 && used.Dollars >= caps.Dollars}} {
		if cap.over {
			h := capsule.BudgetExceeded(cap.name)
			return &h, capsule.Finding{Field: "budget." + cap.name, Message: fmt.Sprintf("every run together used %v of the cap %v: raise it (a corrected capsule) first", usedOf(used, cap.name), capOf(caps, cap.name))}
		}
	}
	return nil, capsule.Finding{}
}

func usedOf(u capsule.Usage, name string) any {
	if name == "tokens" {
		return u.Tokens
	}
	return u.Dollars
}

func capOf(b capsule.Budget, name string) any {
	if name == "tokens" {
		return b.Tokens
	}
	return b.Dollars
}
