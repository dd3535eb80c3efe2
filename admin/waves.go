package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/costs"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/store"
)

// WaveInfo is a wave as `sagactl wave show` and `wave list` show it: its
// caps (0 = none), what its capsules used, what its running capsules hold
// reserved, what is left for new ones, and who waits for it.
type WaveInfo struct {
	WaveID string `json:"wave_id"`
	// Composition names the composition whose budget the wave is (a wave
	// composition-<step id>, costs.CompositionWavePrefix): its
	// composition_id, with "#<run>" from run 2, read from the checkpoint
	// of the step whose id the wave carries. Absent for other waves.
	Composition string        `json:"composition,omitempty"`
	TokensCap   int64         `json:"tokens_cap"`
	DollarsCap  float64       `json:"dollars_cap"`
	Closed      bool          `json:"closed"`
	Used        capsule.Usage `json:"used"`
	Reserved    capsule.Usage `json:"reserved"`
	// TokensLeft and DollarsLeft are cap − used − reserved (never below
	// 0); absent for a dimension without a cap.
	TokensLeft  *int64   `json:"tokens_left,omitempty"`
	DollarsLeft *float64 `json:"dollars_left,omitempty"`
	// Running counts the capsules holding a reservation (admitted, not
	// ended yet).
	Running int `json:"running"`
	// Waiting lists the keys of the capsules waiting for the wave's
	// capacity, oldest first.
	Waiting []string `json:"waiting"`
	// Producers are the producers the wave admits; absent: any.
	Producers []string `json:"producers,omitempty"`
	// Holders says who holds the wave's reservations: per producer ("-"
	// for sagad's own intake), its capsules holding one and what they
	// hold. Absent when no capsule holds one.
	Holders map[string]budget.ProducerHold `json:"holders,omitempty"`
}

// waveRefusal refuses a wave action the wave's state does not allow (exit 5
// in sagactl); it matches [ErrRefused].
type waveRefusal struct{ msg string }

func (e *waveRefusal) Error() string        { return e.msg }
func (e *waveRefusal) Is(target error) bool { return target == ErrRefused }

// ErrInvalidWave matches a wave id or cap the budget refuses (bad_request).
var ErrInvalidWave = budget.ErrInvalidWave

// SetWave creates a wave or changes its caps (a nil cap stays as it is; 0
// means none). Raising a cap lets capsules waiting for the wave's capacity
// go on (the sweeper resumes them, oldest first); lowering it below what is
// used and reserved admits no one until enough is released. A closed wave's
// caps cannot change (refused).
//
// producers, when not nil, is the wave's new admit list: only capsules of
// these producers may join it from now on (empty: any).
func (a *Admin) SetWave(ctx context.Context, waveID string, tokens *int64, dollars *float64, producers *[]string) (WaveInfo, error) {
	w, err := a.st.Budgets.ChangeWave(ctx, waveID, budget.WaveChange{Tokens: tokens, Dollars: dollars, Producers: producers})
	if errors.Is(err, budget.ErrWaveClosed) {
		return WaveInfo{}, &waveRefusal{msg: fmt.Sprintf("cannot set wave %s: it is closed (closing is final)", waveID)}
	}
	if err != nil {
		return WaveInfo{}, err
	}
	a.st.WaveChanged()
	a.metrics.AdminAction(metrics.ActionWaveSet)
	return a.waveInfo(ctx, waveID, w)
}

// CloseWave closes a wave: no capsule is admitted to it any more (Rule 19
// halts those that arrive), those waiting for its capacity halt with
// wave_closed:<wave> (the sweeper), and its running capsules finish.
// Closing a closed wave changes nothing.
func (a *Admin) CloseWave(ctx context.Context, waveID string) (WaveInfo, error) {
	w, err := a.st.Budgets.ChangeWave(ctx, waveID, budget.WaveChange{Close: true})
	if err != nil {
		return WaveInfo{}, err
	}
	a.st.WaveChanged()
	a.metrics.AdminAction(metrics.ActionWaveClose)
	return a.waveInfo(ctx, waveID, w)
}

// Wave reports one wave; store.ErrNotFound if it was never set, charged or
// reserved.
func (a *Admin) Wave(ctx context.Context, waveID string) (WaveInfo, error) {
	if !budget.ValidWaveID(waveID) {
		return WaveInfo{}, fmt.Errorf("wave %q: %w: want 1 to 64 of [A-Za-z0-9_-]", waveID, budget.ErrInvalidWave)
	}
	w, ok, err := a.st.Budgets.Wave(ctx, waveID)
	if err != nil {
		return WaveInfo{}, err
	}
	if !ok {
		return WaveInfo{}, fmt.Errorf("%w: wave %s", store.ErrNotFound, waveID)
	}
	return a.waveInfo(ctx, waveID, w)
}

// Waves reports every wave, sorted by id.
func (a *Admin) Waves(ctx context.Context) ([]WaveInfo, error) {
	list, err := a.st.Budgets.Waves(ctx)
	if err != nil {
		return nil, err
	}
	waiting, err := a.waveWaiters(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]WaveInfo, 0, len(list))
	for _, w := range list {
		info := waveInfoOf(w.ID, w.Wave, waiting[w.ID])
		info.Composition = a.compositionOf(ctx, w.ID)
		out = append(out, info)
	}
	return out, nil
}

func (a *Admin) waveInfo(ctx context.Context, waveID string, w budget.Wave) (WaveInfo, error) {
	waiting, err := a.waveWaiters(ctx)
	if err != nil {
		return WaveInfo{}, err
	}
	info := waveInfoOf(waveID, w, waiting[waveID])
	info.Composition = a.compositionOf(ctx, waveID)
	return info, nil
}

// compositionOf names the composition whose budget waveID is, from the
// checkpoint of the step whose id the wave carries (sagad published that
// step; any capsule may join a wave); "" for any other wave, or when
// that checkpoint cannot be read: the name only helps a person, and the
// wave id is shown either way.
func (a *Admin) compositionOf(ctx context.Context, waveID string) string {
	id, ok := strings.CutPrefix(waveID, costs.CompositionWavePrefix)
	if !ok || id == "" {
		return ""
	}
	cp, _, err := a.st.Checkpoints.Get(ctx, id)
	if err != nil {
		return ""
	}
	return costs.CompositionOf(cp)
}

func waveInfoOf(id string, w budget.Wave, waiting []string) WaveInfo {
	info := WaveInfo{
		WaveID: id, TokensCap: w.TokensCap, DollarsCap: w.DollarsCap, Closed: w.Closed,
		Used: w.Used, Reserved: w.Reserved, Running: w.Holders, Waiting: waiting,
		Producers: w.Producers, Holders: w.ByProducer,
	}
	if info.Waiting == nil {
		info.Waiting = []string{}
	}
	tokens, dollars := w.Left()
	if tokens >= 0 {
		info.TokensLeft = &tokens
	}
	if dollars >= 0 {
		info.DollarsLeft = &dollars
	}
	return info
}

// waveWaiters maps each wave to the keys of the capsules waiting for its
// capacity, oldest first. The continuations bucket holds every waiting
// capsule, so only those are read.
func (a *Admin) waveWaiters(ctx context.Context) (map[string][]string, error) {
	keys, err := a.st.Continuations.Keys(ctx)
	if err != nil {
		return nil, err
	}
	type waiter struct {
		key string
		cp  *capsule.Checkpoint
	}
	byWave := map[string][]waiter{}
	for _, key := range keys {
		cont, err := a.st.Continuations.Get(ctx, key)
		if err != nil || cont.Trigger.Info().Watch != capsule.WatchWave {
			continue // gone meanwhile, or another wait
		}
		cp, _, err := a.st.Checkpoints.Get(ctx, key)
		if err != nil || cp.State.Status != capsule.Waiting || cp.State.Pause == nil || cp.State.Pause.Trigger.Info().Watch != capsule.WatchWave {
			continue
		}
		byWave[cp.WaveID] = append(byWave[cp.WaveID], waiter{key, cp})
	}
	out := make(map[string][]string, len(byWave))
	for id, list := range byWave {
		sort.Slice(list, func(i, j int) bool { return list[i].cp.State.Pause.At.Before(list[j].cp.State.Pause.At) })
		for _, w := range list {
			out[id] = append(out[id], w.key)
		}
	}
	return out, nil
}
