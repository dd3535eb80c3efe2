package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// pauseInfoTimeout bounds one read of a phase consumer's pause.
const pauseInfoTimeout = 5 * time.Second

// pauseView is this process's view of which phase consumers a person has
// paused (admin.PausePhase), so a deferrable advance into a paused phase is
// written instead (deferrable): the capsule then shows the phase it waits
// at, not the one before, for as long as the pause lasts. It costs no
// request per capsule: each phase is read once at Start and again when the
// server announces a pause or resume of its consumer (the pause advisory,
// pushed). The advisory is only a cue, never decoded: the consumer's own
// info decides. A view that lags (an advisory lost, or a pause just made)
// only lets an advance defer as it did before this view: the checkpoint
// then shows the phase before for the pause's length, nothing is lost.
type pauseView struct {
	paused [capsule.NumPhases]atomic.Bool
	// cue holds, per phase, one pending re-read: a burst of advisories
	// (or forged ones) costs one read per phase at a time.
	cue [capsule.NumPhases]chan struct{}
}

// isPaused reports whether ph's consumer was paused when last read.
func (v *pauseView) isPaused(ph capsule.Phase) bool {
	return v != nil && ph.Valid() && v.paused[ph].Load()
}

// set records a pause or resume of ph this process's own admin made: seen
// at once, where another sagad's waits for the advisory. A lagging
// advisory's re-read may set it again; the consumer's info it reads is the
// server's, made after the pause.
func (v *pauseView) set(ph capsule.Phase, paused bool) {
	if ph.Valid() {
		v.paused[ph].Store(paused)
	}
}

// watchPauses reads every phase's pause and keeps the view current until
// ctx ends. A failed subscription leaves the view as first read.
func (p *Pipeline) watchPauses(ctx context.Context) {
	v := &p.pauses
	nc := p.js.Conn()
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		v.cue[ph] = make(chan struct{}, 1)
		subj := "$JS.EVENT.ADVISORY.CONSUMER.PAUSE." + store.PhaseStream(ph) + "." + store.ConsumerName(ph)
		sub, err := nc.Subscribe(subj, func(*nats.Msg) {
			select {
			case v.cue[ph] <- struct{}{}:
			default:
			}
		})
		if err != nil {
			p.log.Warn("phase pauses are not watched", "phase", ph, "error", err)
		} else {
			context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
		}
		p.readPause(ctx, ph)
		go p.rereadPauses(ctx, ph)
	}
}

// rereadPauses reads phase ph's pause again at each cue until ctx ends.
func (p *Pipeline) rereadPauses(ctx context.Context, ph capsule.Phase) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.pauses.cue[ph]:
			p.readPause(ctx, ph)
		}
	}
}

// readPause reads whether phase ph's consumer is paused; on failure the
// view keeps what it had.
func (p *Pipeline) readPause(ctx context.Context, ph capsule.Phase) {
	ctx, cancel := context.WithTimeout(ctx, pauseInfoTimeout)
	defer cancel()
	cons, err := p.js.Consumer(ctx, store.PhaseStream(ph), store.ConsumerName(ph))
	if err != nil {
		p.log.Debug("read a phase's pause", "phase", ph, "error", err)
		return
	}
	p.pauses.paused[ph].Store(cons.CachedInfo().Paused)
}
