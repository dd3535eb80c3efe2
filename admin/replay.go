package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/status"
)

// MaxDependents bounds how many capsules halted dependency_failed one replay
// takes along (transitively); the rest are listed as not replayed.
const MaxDependents = 256

// ReplayOptions say how a replay runs the capsule again.
type ReplayOptions struct {
	By     string
	Reason string
	// From is the phase the new run starts at; nil: where the capsule
	// halted or was cancelled. It may not be later than that.
	From *capsule.Phase
	// Capsule, when set, are corrected capsule bytes of the same id: they
	// are checked as RECEPTION checks an intake, and the run starts at
	// RECEPTION on them.
	Capsule []byte
	// Dependents also replays, each as its own new run from
	// AUTOMATED_GATES, the capsules halted dependency_failed:<id> on this
	// one (transitively), so that they wait for its new run.
	Dependents bool
	// Token names the replay: the same replay tried again (same token)
	// finishes what it started instead of being refused. Empty: a new one.
	Token string
}

// ReplayResult is what a replay did.
type ReplayResult struct {
	// Capsule is the replayed capsule's status, in its new run.
	Capsule status.Status `json:"capsule"`
	// Dependents are the capsules halted dependency_failed on it that were
	// replayed with it (or why not), in the order replayed.
	Dependents []DependentReplay `json:"dependents"`
}

// DependentReplay is one dependent a replay took along.
type DependentReplay struct {
	CapsuleID string `json:"capsule_id"`
	Key       string `json:"key"`
	// Run is the dependent's new run (0 when it was not replayed).
	Run int `json:"run,omitempty"`
	// State is the dependent's state after the replay.
	State capsule.State `json:"state,omitempty"`
	// Error says why it was not replayed.
	Error string `json:"error,omitempty"`
}

// Replay runs a halted or cancelled capsule again as a new run of the same
// id (PIPELINE §7, sagactl replay). The run is one machine.Replay event
// written by one compare-and-set; then the run's bytes are kept (marked
// with the run), the phase message sent and the event published. Replays
// racing make one run; the others are refused. A replay that dies half-way
// leaves the run started, and the rescuer sends its step again (the run's
// bytes are kept again first, see store.RunBytes). Anything it refuses
// changes nothing.
func (a *Admin) Replay(ctx context.Context, id string, opts ReplayOptions) (ReplayResult, error) {
	if opts.Token == "" {
		opts.Token = nuid.Next()
	}
	found, err := a.st.Checkpoints.Find(ctx, id)
	if err != nil {
		return ReplayResult{}, err
	}
	cp, err := a.replayOne(ctx, found, opts)
	if err != nil {
		return ReplayResult{}, err
	}
	a.metrics.AdminAction(metrics.ActionReplay)
	out := ReplayResult{Capsule: status.Of(cp), Dependents: []DependentReplay{}}
	if opts.Dependents {
		deps, err := a.replayDependents(ctx, cp, opts)
		if err != nil {
			return out, err
		}
		out.Dependents = deps
	}
	return out, nil
}

// replayOne starts (or finishes) the new run of found.
func (a *Admin) replayOne(ctx context.Context, found *capsule.Checkpoint, opts ReplayOptions) (*capsule.Checkpoint, error) {
	ev := machine.Replay{Token: opts.Token, By: opts.By, Reason: opts.Reason}
	if opts.From != nil {
		ev.From, ev.FromSet = *opts.From, true
	}
	var raw []byte
	if opts.Capsule != nil {
		d, err := a.checkCorrected(ctx, found, ev, opts.Capsule)
		if err != nil {
			return nil, err
		}
		ev.Digest, raw = d, opts.Capsule
		// Staged before the run starts, so a replay that dies once it has
		// started it leaves bytes the run can be finished with.
		if err := a.st.StageBytes(ctx, found.Key, d, raw); err != nil {
			return nil, err
		}
	}
	at := a.now()
	res, err := a.Apply(ctx, found.Key, ev)
	if err != nil {
		return nil, err
	}
	cp := res.Checkpoint
	if cp.ReplayToken != opts.Token {
		return nil, fmt.Errorf("replay %s: the checkpoint does not record this replay", found.Key) // a bug
	}
	if cp.Terminal() {
		// The same replay again, after its run ended: nothing to finish.
		return cp, nil
	}
	if raw != nil && cp.Digest == ev.Digest {
		err = a.st.KeepRunBytes(ctx, cp, raw)
	} else {
		raw, _, err = a.st.RunBytes(ctx, cp)
	}
	if err != nil {
		return cp, err
	}
	if err := a.st.Continuations.DeleteIfStale(ctx, cp.Key, cp); err != nil {
		return cp, err
	}
	// The event before the phase message, which may run the new run to
	// its end: the history reads replayed, then the run.
	if err := a.adminEvent(ctx, cp, at, capsule.EventReplayed, opts.Token, replayDetail(cp), "", opts.By, nil); err != nil {
		return cp, err
	}
	if cp.State.Status == capsule.InProgress {
		if err := a.st.PublishPhase(ctx, cp, ""); err != nil {
			return cp, err
		}
	}
	return cp, nil
}

// replayDetail is the run boundary's detail, for the replayed event.
func replayDetail(cp *capsule.Checkpoint) string {
	for i := len(cp.History) - 1; i >= 0; i-- {
		if tr := cp.History[i]; tr.Outcome == capsule.OutcomeReplayed && tr.Run == cp.RunNumber() {
			return tr.Detail
		}
	}
	return fmt.Sprintf("run %d", cp.RunNumber())
}

// checkCorrected checks corrected bytes as RECEPTION checks an intake, and
// that they are a capsule of found's id; it returns their digest. A replay
// found's state refuses is refused before the bytes are looked at.
func (a *Admin) checkCorrected(ctx context.Context, found *capsule.Checkpoint, ev machine.Replay, raw []byte) (string, error) {
	// The state first, as the stream's leader has it: nothing is staged
	// for a replay that is refused.
	latest, _, err := a.st.Checkpoints.GetLatest(ctx, found.Key, nil)
	if err != nil {
		return "", err
	}
	probe := ev
	probe.Digest = "probe"
	if _, err := machine.Apply(latest, probe, a.now()); err != nil {
		return "", err
	}
	r := phases.Receive(ctx, a.env, raw, func(string) string { return found.Key })
	switch r.Decision.Action {
	case phases.Retry:
		return "", fmt.Errorf("check the corrected capsule: %w", r.Decision.Err)
	case phases.Halt:
		return "", replayRefusal(found, "the corrected capsule would halt at RECEPTION: "+r.Decision.Halt.String()+findingsHint(r.Decision.Findings))
	}
	if err := a.checkIdentity(ctx, latest, found, r.Capsule); err != nil {
		return "", err
	}
	return r.Digest, nil
}

// checkIdentity refuses a correction that changes who the capsule is
// rather than its work (identityFindings), latest being its checkpoint.
func (a *Admin) checkIdentity(ctx context.Context, latest, found *capsule.Checkpoint, corrected *capsule.Capsule) error {
	if corrected.CapsuleID != found.CapsuleID {
		return replayRefusal(found, fmt.Sprintf("the corrected capsule's id is %q, not %q", corrected.CapsuleID, found.CapsuleID))
	}
	// Chain membership is sagad's to give (RECEPTION's
	// chain_membership_refused): a correction keeps the capsule's.
	if !sameChain(corrected.Chain.Member(), found.Chain) {
		return replayRefusal(found, "the corrected capsule's chain differs from the capsule's: only sagad assigns chain steps")
	}
	orig, err := a.originalIdentity(ctx, latest, corrected)
	if err != nil {
		return err
	}
	if fs := identityFindings(orig, corrected); len(fs) > 0 {
		return replayRefusal(found, "the corrected capsule changes who it is, not only its work"+findingsHint(fs))
	}
	return nil
}

// originalIdentity is the capsule a correction of cp is held to: the
// bytes of its current run as sagad kept them, when their digest is the
// one the checkpoint records (the checkpoint is the truth), else what the
// checkpoint itself records of the capsule's identity.
func (a *Admin) originalIdentity(ctx context.Context, cp *capsule.Checkpoint, corrected *capsule.Capsule) (*capsule.Capsule, error) {
	_, c, err := a.st.Raw(ctx, cp.Key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return checkpointIdentity(cp, corrected), nil
	case err != nil:
		return nil, fmt.Errorf("read the capsule a correction replaces: %w", err)
	case c == nil || (cp.Digest != "" && c.Integrity.SHA256 != cp.Digest):
		return checkpointIdentity(cp, corrected), nil
	}
	return c, nil
}

// maxHintFindings bounds the findings a refusal names: enough to fix a
// capsule in one go, short enough to read in a line.
const maxHintFindings = 10

// findingsHint lists a refused capsule's findings (field: message; …) so
// the operator sees everything to fix, not only the first.
func findingsHint(fs []capsule.Finding) string {
	if len(fs) == 0 {
		return ""
	}
	parts := make([]string, 0, min(len(fs), maxHintFindings)+1)
	for _, f := range fs[:min(len(fs), maxHintFindings)] {
		parts = append(parts, strings.TrimPrefix(f.Field+": "+f.Message, ": "))
	}
	if n := len(fs) - maxHintFindings; n > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", n))
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func sameChain(a, b *capsule.ChainStep) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func replayRefusal(cp *capsule.Checkpoint, hint string) error {
	return &machine.Refusal{Kind: machine.ErrRefused, Event: "replay", Key: cp.Key, State: cp.State.Status, Hint: hint}
}

// replayDependents replays the capsules halted dependency_failed on cp's
// capsule, and on those, transitively (one scan of the checkpoints, at most
// MaxDependents), each from AUTOMATED_GATES as its own new run: they then
// wait for the runs they depend on. Each dependent's replay token derives
// from the replay's, so a replay tried again finishes them too.
func (a *Admin) replayDependents(ctx context.Context, cp *capsule.Checkpoint, opts ReplayOptions) ([]DependentReplay, error) {
	gates := capsule.AutomatedGates
	return a.walkDependents(ctx, cp, func(d *capsule.Checkpoint) DependentReplay {
		item := DependentReplay{CapsuleID: d.CapsuleID, Key: d.Key}
		dopts := ReplayOptions{By: opts.By, Reason: "dependency " + cp.CapsuleID + " replayed", From: &gates, Token: opts.Token + "." + d.Key}
		if d.State.Phase < gates {
			dopts.From = nil
		}
		ncp, err := a.replayOne(ctx, d, dopts)
		if err != nil {
			item.Error = err.Error()
			return item
		}
		item.Run, item.State = ncp.RunNumber(), ncp.State.Status
		a.metrics.AdminAction(metrics.ActionReplay)
		return item
	})
}

// dependentsOf lists what replayDependents would replay, replaying none:
// each with the run it would start.
func (a *Admin) dependentsOf(ctx context.Context, cp *capsule.Checkpoint) ([]DependentReplay, error) {
	return a.walkDependents(ctx, cp, func(d *capsule.Checkpoint) DependentReplay {
		return DependentReplay{CapsuleID: d.CapsuleID, Key: d.Key, Run: d.RunNumber() + 1, State: capsule.InProgress}
	})
}

// walkDependents calls each on the capsules halted dependency_failed on
// cp's capsule, and on those, transitively (one scan of the checkpoints),
// at most MaxDependents; the walk goes on past a dependent whose item
// carries no Error.
func (a *Admin) walkDependents(ctx context.Context, cp *capsule.Checkpoint, each func(d *capsule.Checkpoint) DependentReplay) ([]DependentReplay, error) {
	all, err := a.st.Checkpoints.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("find the dependents of %s: %w", cp.Key, err)
	}
	onID := map[string][]*capsule.Checkpoint{}
	for _, d := range all {
		r := capsule.ParseHaltReason(d.State.HaltReason)
		if d.State.Status == capsule.Halted && r.Code == capsule.CodeDependencyFailed {
			onID[r.Detail] = append(onID[r.Detail], d)
		}
	}
	out := []DependentReplay{}
	seen := map[string]bool{cp.Key: true}
	queue := []string{cp.CapsuleID}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, d := range onID[id] {
			if seen[d.Key] {
				continue
			}
			seen[d.Key] = true
			if len(out) >= MaxDependents {
				out = append(out, DependentReplay{CapsuleID: d.CapsuleID, Key: d.Key,
					Error: fmt.Sprintf("not replayed: more than %d dependents; replay it by hand", MaxDependents)})
				continue
			}
			item := each(d)
			if item.Error == "" {
				queue = append(queue, d.CapsuleID)
			}
			out = append(out, item)
		}
	}
	return out, nil
}
