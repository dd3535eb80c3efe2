package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
)

// sweep looks at every parked capsule once: lock_contention capsules resume
// when all their locks are free; capsules waiting for accepted external work
// keep their locks alive, and halt when the result is overdue. Every sagad
// sweeps; the actions are compare-and-sets, so they never double up.
func (p *Pipeline) sweep(ctx context.Context) {
	keys, err := p.continuations.Keys(ctx)
	if err != nil {
		p.log.Warn("sweep: list continuations", "error", err)
		return
	}
	admin := p.Admin()
	for _, key := range keys {
		cp, _, err := p.checkpoints.Get(ctx, key)
		if err != nil {
			continue
		}
		if cp.State.Status != capsule.Paused {
			// Resumed or ended meanwhile (a capsule can end while paused,
			// when the phase it was in halts): the record is stale. An
			// ending whose effects did not all go out gets them again first.
			if cp.State.Status.Terminal() {
				if err := admin.reemitEnd(ctx, cp); err != nil {
					p.log.Warn("sweep: re-emit ending", "key", key, "error", err)
					continue
				}
			}
			if err := p.continuations.DeleteIfStale(ctx, key, cp); err != nil {
				p.log.Warn("sweep: delete stale continuation", "key", key, "error", err)
			}
			continue
		}
		if cp.State.Pause == nil {
			continue
		}
		switch cp.State.Pause.Trigger {
		case capsule.TriggerLockContention:
			_, c, err := admin.raw(ctx, key)
			if err != nil || c == nil {
				continue
			}
			free := true
			for _, path := range c.Constraints.ResourceLocksRequired {
				if ok, err := p.locks.Available(ctx, path, key); err != nil || !ok {
					free = false
					break
				}
			}
			if free {
				if _, err := admin.Resume(ctx, key, ResumeOptions{By: capsule.BySagad, Reason: "its locks are free"}); err != nil && !errors.Is(err, ErrRefused) {
					p.log.Warn("sweep: resume after lock contention", "key", key, "error", err)
				}
			}
		case capsule.TriggerBlockedExternal:
			if cp.State.AwaitingCycle == 0 {
				continue
			}
			overdue, within := cp.State.Pause.At.Add(p.cfg.ExternalTimeout), p.cfg.ExternalTimeout
			if u := cp.State.AwaitingUntil; u != nil {
				// The endpoint's own completion_timeout.
				overdue, within = *u, roundTimeout(u.Sub(cp.State.Pause.At))
			}
			if p.cfg.Now().After(overdue) {
				reason := capsule.ExecutorFailed(fmt.Sprintf("no result for cycle %d within %s", cp.State.AwaitingCycle, within))
				pausedAt := cp.State.Pause.At
				if _, err := admin.end(ctx, key, machine.End{State: capsule.Halted, Detail: reason.String(), IfPausedAt: &pausedAt}); err != nil && !errors.Is(err, ErrRefused) {
					p.log.Warn("sweep: halt overdue external work", "key", key, "error", err)
				}
				continue
			}
			if _, c, err := admin.raw(ctx, key); err == nil && c != nil {
				if err := p.locks.Renew(ctx, c.Constraints.ResourceLocksRequired, key); err != nil {
					p.log.Warn("sweep: renew locks of a capsule waiting for external work", "key", key, "error", err)
				}
			}
		}
	}
}

// roundTimeout rounds an endpoint's completion timeout as measured from the
// checkpoint (the acceptance was recorded a moment after the call returned)
// back to the duration it was configured as.
func roundTimeout(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// runSweeper sweeps every SweepInterval until ctx ends.
func (p *Pipeline) runSweeper(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(p.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.sweep(ctx)
		}
	}
}

// complete records the result of accepted work delivered on
// saga.complete.<capsule_id>.<cycle> and resumes the capsule, which then
// finishes EXECUTION without running the executor again. A result for a
// cycle already recorded, or for a capsule not waiting for it, is ignored.
func (p *Pipeline) complete(ctx context.Context, msg jetstream.Msg) delivery {
	key, cycle, err := executors.ParseCompletionSubject(msg.Subject())
	if err == nil && !validKey(key) {
		err = fmt.Errorf("capsule key %q is no valid KV key", printableKey(key))
	}
	if err != nil {
		return term(metrics.TermBadSubject, err)
	}
	comp, derr := executors.DecodeCompletion(msg.Data())
	if derr == nil && comp.Kind != executors.KindExecute {
		return term(metrics.TermReviewCompletion, errors.New("reviewers answer synchronously: review completions are not taken"))
	}
	cp, _, err := p.checkpoints.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		// A read may be served by a replica that is behind: try again for
		// a while before giving up on the capsule.
		if md, merr := msg.Metadata(); merr == nil && md.NumDelivered >= forgottenAfter {
			return term(metrics.TermUnknownCapsule, fmt.Errorf("completion: %w", err))
		}
		return nakAfter(p.cfg.RetryDelay, err)
	}
	if err != nil {
		return nakAfter(p.cfg.RetryDelay, err)
	}
	st := cp.State
	if st.Status == capsule.InProgress && st.Phase == capsule.Execution && st.Cycle == cycle {
		// The executor answered "accepted" and its result came back before
		// the capsule's park was recorded: keep the result until it is.
		return nakAfter(p.cfg.RetryDelay, nil)
	}
	waiting := st.Status == capsule.Paused && st.Pause != nil &&
		st.Phase == capsule.Execution && st.Cycle == cycle && st.AwaitingCycle == cycle
	if !waiting {
		p.log.Info("completion ignored: not awaited (already recorded, or the capsule moved on)", "key", key, "cycle", cycle, "state", st.Status)
		return ack()
	}
	// An operator who paused the capsule meanwhile keeps it paused: the
	// result is recorded, and their resume will use it.
	operatorHold := st.Pause.Trigger == capsule.TriggerOperatorManual
	admin := p.Admin()
	if st.Result == nil || st.Result.Cycle != cycle {
		_, c, err := admin.raw(ctx, key)
		if err != nil {
			return nakAfter(p.cfg.RetryDelay, fmt.Errorf("completion: %w", err))
		}
		if c == nil {
			return ack()
		}
		result := &capsule.ExecutionResult{Cycle: cycle, Usage: comp.Usage}
		switch {
		case derr != nil:
			result.Failed = "malformed completion: " + derr.Error()
		case comp.Status == executors.StatusFailed:
			result.Failed = strings.TrimSpace(comp.Error)
			if result.Failed == "" {
				result.Failed = "the executor reported failure"
			}
		default:
			content := comp.Content
			ref, err := p.env.Artifacts.Put(ctx, capsule.Artifact{
				SchemaVersion: "1.0", CapsuleID: c.CapsuleID, ProducerAgentID: c.ProducerAgentID, Cycle: cycle,
				MediaType: comp.MediaType, SHA256: sha256Hex(content), Size: int64(len(content)), Usage: comp.Usage,
				CreatedAt: p.cfg.Now().UTC(), Content: json.RawMessage(content),
			})
			if err != nil {
				return nakAfter(p.cfg.RetryDelay, err)
			}
			result.ArtifactRef = ref
		}
		if _, err := admin.apply(ctx, key, machine.RecordResult{Cycle: cycle, Result: *result}); err != nil {
			return nakAfter(p.cfg.RetryDelay, err)
		}
	}
	if operatorHold {
		return ack()
	}
	if _, err := admin.Resume(ctx, key, ResumeOptions{By: capsule.BySagad, Reason: "the external result arrived", Force: true}); err != nil && !errors.Is(err, ErrRefused) {
		return nakAfter(p.cfg.RetryDelay, err)
	}
	return ack()
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
