package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/store"
)

// SweeperConfig configures a [Sweeper].
type SweeperConfig struct {
	// Logger receives what a sweep could not do. Defaults to discarding.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Interval is how often parked capsules are looked at. Defaults to 5s.
	Interval time.Duration
	// ExternalTimeout is how long accepted external work may take when its
	// endpoint set no completion_timeout. Defaults to 1h.
	ExternalTimeout time.Duration
	// DependencyTimeout is how long a capsule waits for a dependency sagad
	// does not know (never received, or forgotten after the retention)
	// before it halts with dependency_missing. Defaults to 24h.
	DependencyTimeout time.Duration
}

func (c SweeperConfig) withDefaults() SweeperConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.ExternalTimeout <= 0 {
		c.ExternalTimeout = time.Hour
	}
	if c.DependencyTimeout <= 0 {
		c.DependencyTimeout = 24 * time.Hour
	}
	return c
}

// Sweeper is the maintenance service that looks after parked capsules (see
// [Sweeper.Sweep]). Every sagad runs one; its actions are machine events
// written with compare-and-sets, so sweepers never double up.
type Sweeper struct {
	st    *store.Store
	admin *admin.Admin
	cfg   SweeperConfig
	log   *slog.Logger

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
	// wake asks for a sweep now (Wake).
	wake chan struct{}
	// holdChecked is when each wave's reservations were last checked
	// (releaseEnded).
	holdMu      sync.Mutex
	holdChecked map[string]time.Time
}

// NewSweeper returns a sweeper over st that acts through a.
func NewSweeper(st *store.Store, a *admin.Admin, cfg SweeperConfig) *Sweeper {
	cfg = cfg.withDefaults()
	return &Sweeper{st: st, admin: a, cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1)}
}

// Start sweeps every Interval until Stop (or ctx ends).
func (w *Sweeper) Start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func(done chan<- struct{}) {
		defer close(done)
		t := time.NewTicker(w.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.Sweep(ctx)
			case <-w.wake:
				w.Sweep(ctx)
				// Every release of a wave reservation wakes: at most one
				// woken sweep per gap, whatever the rate of endings.
				select {
				case <-ctx.Done():
					return
				case <-time.After(min(w.cfg.Interval, 200*time.Millisecond)):
				}
			}
		}
	}(w.done)
}

// Stop stops sweeping and returns once a sweep in progress has ended.
func (w *Sweeper) Stop() {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.stop, w.done = nil, nil
	w.mu.Unlock()
	if done == nil {
		return
	}
	stop()
	<-done
}

// Sweep looks at every parked capsule once: lock_contention capsules resume
// when all their locks are free; capsules waiting for accepted external work
// keep their locks alive, and halt when the result is overdue; capsules
// waiting for dependencies or for their wave's capacity go on or halt (see
// dependencies and waves). Any parked capsule, a capsule waiting for an
// operator too, whose deadline passed halts deadline_exceeded:<phase>.
// Every sagad sweeps; the actions are compare-and-sets, so they never
// double up.
func (w *Sweeper) Sweep(ctx context.Context) {
	keys, err := w.st.Continuations.Keys(ctx)
	if err != nil {
		w.log.Warn("sweep: list continuations", "error", err)
		return
	}
	var waveWaiters []*capsule.Checkpoint
	for _, key := range keys {
		cp, _, err := w.st.Checkpoints.Get(ctx, key)
		if err != nil {
			// (A checkpoint sagad did not write is reported once, and
			// skipped at every sweep without a line.)
			w.st.Checkpoints.Corrupt.Report(err, "left parked: a message about the capsule halts it")
			continue
		}
		if w.expired(ctx, cp) {
			continue
		}
		switch cp.State.Status {
		case capsule.WaitingForOperator:
			// A person decides; only its deadline is the sweeper's.
		case capsule.Waiting:
			// What it waits for is its trigger's row of capsule.TriggerTable.
			switch info, _ := cp.State.ParkedBy(); info.Watch {
			case capsule.WatchWave:
				waveWaiters = append(waveWaiters, cp) // one wave at a time, after the loop
			case capsule.WatchDependencies:
				w.dependencies(ctx, cp)
			case capsule.WatchParent:
				w.parentCapacity(ctx, cp)
			}
		case capsule.Paused:
			w.paused(ctx, key, cp)
		default:
			w.stale(ctx, key, cp)
		}
	}
	w.waves(ctx, waveWaiters)
}

// stale drops the continuation of a capsule resumed or ended meanwhile (a
// capsule can end while paused, when the phase it was in halts). An ending
// whose effects did not all go out gets them again first.
func (w *Sweeper) stale(ctx context.Context, key string, cp *capsule.Checkpoint) {
	if cp.State.Status.Terminal() {
		if err := w.admin.ReemitEnd(ctx, cp); err != nil {
			w.log.Warn("sweep: re-emit ending", "key", key, "error", err)
			return
		}
	}
	if err := w.st.Continuations.DeleteIfStale(ctx, key, cp); err != nil {
		w.log.Warn("sweep: delete stale continuation", "key", key, "error", err)
	}
}

// paused looks at what a paused capsule's trigger watches (its row of
// capsule.TriggerTable): its locks, or the external work it awaits.
func (w *Sweeper) paused(ctx context.Context, key string, cp *capsule.Checkpoint) {
	if cp.State.Pause == nil {
		return
	}
	switch cp.State.Pause.Trigger.Info().Watch {
	case capsule.WatchLocks:
		w.lockContention(ctx, key)
	case capsule.WatchExternal:
		w.external(ctx, key, cp)
	}
}

// lockContention resumes a capsule paused on lock_contention once all its
// locks are free.
func (w *Sweeper) lockContention(ctx context.Context, key string) {
	_, c, err := w.st.Raw(ctx, key)
	if err != nil || c == nil {
		return
	}
	for _, path := range c.Constraints.ResourceLocksRequired {
		if ok, err := w.st.Locks.Available(ctx, path, key); err != nil || !ok {
			return
		}
	}
	if _, err := w.admin.Resume(ctx, key, admin.ResumeOptions{By: capsule.BySagad, Reason: "its locks are free"}); err != nil && !errors.Is(err, admin.ErrRefused) {
		w.log.Warn("sweep: resume after lock contention", "key", key, "error", err)
	}
}

// external halts a capsule whose accepted external work is overdue, and
// otherwise keeps its locks alive while it waits.
func (w *Sweeper) external(ctx context.Context, key string, cp *capsule.Checkpoint) {
	if cp.State.AwaitingCycle == 0 {
		return
	}
	overdue, within := cp.State.Pause.At.Add(w.cfg.ExternalTimeout), w.cfg.ExternalTimeout
	if u := cp.State.AwaitingUntil; u != nil {
		// The endpoint's own completion_timeout.
		overdue, within = *u, roundTimeout(u.Sub(cp.State.Pause.At))
	}
	if w.cfg.Now().After(overdue) {
		reason := capsule.ExecutorFailed(fmt.Sprintf("no result for cycle %d within %s", cp.State.AwaitingCycle, within))
		pausedAt := cp.State.Pause.At
		if _, err := w.admin.End(ctx, key, machine.End{State: capsule.Halted, Detail: reason.String(), IfPausedAt: &pausedAt}); err != nil && !errors.Is(err, admin.ErrRefused) {
			w.log.Warn("sweep: halt overdue external work", "key", key, "error", err)
		}
		return
	}
	if _, c, err := w.st.Raw(ctx, key); err == nil && c != nil {
		if err := w.st.Locks.Renew(ctx, c.Constraints.ResourceLocksRequired, key); err != nil {
			w.log.Warn("sweep: renew locks of a capsule waiting for external work", "key", key, "error", err)
		}
	}
}

// expired halts cp deadline_exceeded:<phase> when it is parked (waiting,
// paused on any trigger, or waiting for an operator) and its deadline in
// force has passed, and reports whether the sweep is done with it. The
// machine judges the deadline again on the checkpoint it writes, so a
// resume that moved the deadline meanwhile wins, and a second sagad's
// sweeper finds the capsule ended (a refusal, not an error).
func (w *Sweeper) expired(ctx context.Context, cp *capsule.Checkpoint) bool {
	st := cp.State
	if st.Pause == nil || (st.Status != capsule.Paused && st.Status != capsule.Waiting && st.Status != capsule.WaitingForOperator) {
		return false
	}
	_, c, err := w.st.Raw(ctx, cp.Key)
	if err != nil || c == nil || c.Deadline.IsZero() {
		return false
	}
	if w.cfg.Now().Before(st.DeadlineIn(c.Deadline)) {
		return false
	}
	deadline := c.Deadline
	_, err = w.admin.End(ctx, cp.Key, machine.End{State: capsule.Halted, IfDeadlinePassed: &deadline})
	if err != nil && !errors.Is(err, admin.ErrRefused) {
		w.log.Warn("sweep: halt a capsule past its deadline", "key", cp.Key, "error", err)
	}
	// Refused: it moved on, or the machine's clock says the deadline is
	// still ahead; what else it waits for is looked at as usual.
	return err == nil
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

// dependencies looks at a capsule waiting for its dependencies: when they all
// completed it resumes (AUTOMATED_GATES runs again); one that waits for this
// capsule in turn, directly or through others, halts every capsule of the
// cycle with dependency_cycle:<ids>; one that halted or was cancelled halts
// it with dependency_failed:<id>, and one still unknown after
// DependencyTimeout with dependency_missing:<id>.
func (w *Sweeper) dependencies(ctx context.Context, cp *capsule.Checkpoint) {
	st := cp.State
	if st.Pause == nil {
		return
	}
	since := st.Pause.At
	facts, ok := w.st.Facts().(interface {
		DependencyState(ctx context.Context, id string) (capsule.State, bool, error)
	})
	if !ok {
		return
	}
	halt := func(reason capsule.HaltReason) {
		if _, err := w.admin.End(ctx, cp.Key, machine.End{State: capsule.Halted, Detail: reason.String(), IfWaitingSince: &since}); err != nil && !errors.Is(err, admin.ErrRefused) {
			w.log.Warn("sweep: halt a waiting capsule", "key", cp.Key, "error", err)
		}
	}
	// A cycle is looked for once, and only when a dependency waits or
	// halted: a cycle's first member to halt leaves the others a halted
	// dependency, and they must halt dependency_cycle too, not
	// dependency_failed.
	searched := false
	inCycle := func() bool {
		if searched {
			return false
		}
		searched = true
		cycle, err := w.dependencyCycle(ctx, cp.Key, st.WaitingFor)
		if err != nil {
			w.log.Warn("sweep: look for a dependency cycle", "key", cp.Key, "error", err)
			return false
		}
		if cycle == nil {
			return false
		}
		w.log.Info("sweep: dependency cycle", "capsule_id", cp.CapsuleID, "cycle", cycle)
		halt(capsule.DependencyCycle(cycle))
		return true
	}
	var waiting bool
	for _, id := range st.WaitingFor {
		state, known, err := facts.DependencyState(ctx, id)
		if err != nil {
			return // try again next sweep
		}
		switch {
		case !known:
			if w.cfg.Now().Sub(since) > w.cfg.DependencyTimeout {
				halt(capsule.DependencyMissing(id))
				return
			}
			waiting = true
		case state == capsule.Halted || state == capsule.Cancelled:
			if state == capsule.Halted && inCycle() {
				return
			}
			halt(capsule.DependencyFailed(id))
			return
		case state == capsule.Completed:
		case state == capsule.Waiting && inCycle():
			return
		default:
			waiting = true
		}
	}
	if waiting {
		return
	}
	if _, err := w.admin.ResumeWaiting(ctx, cp.Key, admin.ResumeOptions{By: capsule.BySagad, Reason: "its dependencies completed"}); err != nil && !errors.Is(err, admin.ErrRefused) {
		w.log.Warn("sweep: resume a capsule whose dependencies completed", "key", cp.Key, "error", err)
	}
}
