package maintenance

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/store"
)

// Wake asks for a sweep as soon as the one in progress, if any, ended;
// wakes that come meanwhile make one sweep. It never blocks: the store
// calls it when a wave changed (store.Store.OnWaveChange).
func (w *Sweeper) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// waves looks at the capsules waiting for their wave's capacity, one wave at
// a time. A closed wave halts them with wave_closed:<wave>. Otherwise they
// are resumed oldest first while the wave, as read, has room for each
// (AUTOMATED_GATES then reserves; one that finds the room taken after all
// waits again): first come, first served, so a large capsule is not passed
// for ever by smaller ones. A capsule whose caps exceed the wave's whole cap
// waits for the cap to be raised and does not hold up the others.
//
// Every action is a machine event written with a compare-and-set (a halt
// only of a capsule still waiting since the sweep saw it), so sweepers of
// several sagads never double up; a resume that loses still finds the
// reservation made once.
func (w *Sweeper) waves(ctx context.Context, waiting []*capsule.Checkpoint) {
	byWave := map[string][]*capsule.Checkpoint{}
	for _, cp := range waiting {
		if cp.WaveID != "" {
			byWave[cp.WaveID] = append(byWave[cp.WaveID], cp)
		}
	}
	for id, list := range byWave {
		if ctx.Err() != nil {
			return
		}
		w.wave(ctx, id, list)
	}
}

func (w *Sweeper) wave(ctx context.Context, id string, list []*capsule.Checkpoint) {
	if w.st.Budgets == nil {
		return
	}
	// Closing is final, so a replica that shows the wave closed is right;
	// one behind on room only delays a resume to the next sweep.
	wv, _, err := w.st.Budgets.Wave(ctx, id)
	if err == nil && w.releaseEnded(ctx, id, wv) {
		wv, _, err = w.st.Budgets.Wave(ctx, id)
	}
	if e, ok := corrupt.As(err); ok {
		// A wave record sagad did not write says nothing of the wave's
		// room: its capsules would wait forever.
		w.st.Checkpoints.Corrupt.Report(err, "the capsules waiting for the wave halt state_corrupt")
		w.haltWaiting(ctx, id, list, capsule.StateCorrupt(e.Bucket))
		return
	}
	if err != nil {
		w.log.Warn("sweep: read a wave", "wave", id, "error", err)
		return
	}
	if wv.Closed {
		w.haltWaiting(ctx, id, list, capsule.WaveClosed(id))
		return
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i].State.Pause.At, list[j].State.Pause.At
		if !a.Equal(b) {
			return a.Before(b)
		}
		return list[i].Key < list[j].Key
	})
	room := wv
	for _, cp := range list {
		_, c, err := w.st.Raw(ctx, cp.Key)
		if err != nil || c == nil {
			continue
		}
		caps := cp.State.Caps(c.Budget)
		if !room.CouldFit(caps) {
			continue // only a raised cap lets it in
		}
		if !room.Fits(caps) {
			return // the oldest that could fit goes first
		}
		if _, err := w.admin.ResumeWaiting(ctx, cp.Key, admin.ResumeOptions{By: capsule.BySagad, Reason: "its wave has room"}); err != nil {
			if !errors.Is(err, admin.ErrRefused) {
				w.log.Warn("sweep: resume a capsule its wave has room for", "key", cp.Key, "wave", id, "error", err)
			}
			continue
		}
		room.Reserved = room.Reserved.Add(capsule.Usage{Tokens: caps.Tokens, Dollars: caps.Dollars})
	}
}

// holdCheckEvery is how often the reservations of a wave that has capsules
// waiting are checked for capsules that ended without releasing theirs.
const holdCheckEvery = time.Minute

// releaseEnded releases the reservations of wave id whose capsules have
// ended or are forgotten, at most once per holdCheckEvery and only for a
// wave someone waits for, and reports whether it released any. Every
// ending releases its capsule's reservation itself (store.Emit); what
// this catches is an AUTOMATED_GATES delivery that reserved for a capsule
// after its end had been emitted (a cancel racing the admission), which
// would otherwise hold capacity for ever.
func (w *Sweeper) releaseEnded(ctx context.Context, id string, wv budget.Wave) bool {
	if wv.Holders == 0 {
		return false
	}
	w.holdMu.Lock()
	if w.holdChecked == nil {
		w.holdChecked = map[string]time.Time{}
	}
	now := w.cfg.Now()
	if last, ok := w.holdChecked[id]; ok && now.Sub(last) < holdCheckEvery {
		w.holdMu.Unlock()
		return false
	}
	w.holdChecked[id] = now
	w.holdMu.Unlock()
	holders, err := w.st.Budgets.Holders(ctx, id)
	if err != nil {
		w.log.Warn("sweep: read a wave's reservations", "wave", id, "error", err)
		return false
	}
	released := false
	for _, key := range holders {
		// The leader's answer: an end read from a lagging replica would
		// still be an end, but a missing checkpoint must really be missing.
		cp, _, err := w.st.Checkpoints.GetLatest(ctx, key, nil)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			continue
		case !cp.State.Status.Terminal():
			continue
		}
		if _, ok, err := w.st.Budgets.Release(ctx, id, key); err != nil {
			w.log.Warn("sweep: release the reservation of an ended capsule", "wave", id, "key", key, "error", err)
		} else if ok {
			w.log.Info("sweep: released the reservation of an ended capsule", "wave", id, "key", key)
			released = true
		}
	}
	return released
}

// haltWaiting halts the capsules of list, waiting for wave id's capacity,
// for reason; one that moved meanwhile is left alone.
func (w *Sweeper) haltWaiting(ctx context.Context, id string, list []*capsule.Checkpoint, reason capsule.HaltReason) {
	for _, cp := range list {
		since := cp.State.Pause.At
		if _, err := w.admin.End(ctx, cp.Key, machine.End{
			State: capsule.Halted, Detail: reason.String(), IfWaitingSince: &since,
		}); err != nil && !errors.Is(err, admin.ErrRefused) {
			w.log.Warn("sweep: halt a capsule waiting for its wave", "key", cp.Key, "wave", id, "reason", reason.String(), "error", err)
		}
	}
}
