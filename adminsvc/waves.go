package adminsvc

import (
	"bytes"
	"context"
	"errors"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/budget"
)

// Wave verbs: a wave's budget caps, closing it, and what it holds.
const (
	VerbWaveSet   = "wave.set"
	VerbWaveShow  = "wave.show"
	VerbWaveList  = "wave.list"
	VerbWaveClose = "wave.close"
)

// WaveVerbs lists the wave verbs (registered after [Verbs]' others).
var WaveVerbs = []string{VerbWaveSet, VerbWaveShow, VerbWaveList, VerbWaveClose}

// WaveActions are the wave actions the service carries out; *admin.Admin
// implements them. Actions that do not are answered internal on the wave
// verbs.
type WaveActions interface {
	SetWave(ctx context.Context, waveID string, tokens *int64, dollars *float64, producers *[]string) (admin.WaveInfo, error)
	CloseWave(ctx context.Context, waveID string) (admin.WaveInfo, error)
	Wave(ctx context.Context, waveID string) (admin.WaveInfo, error)
	Waves(ctx context.Context) ([]admin.WaveInfo, error)
}

var _ WaveActions = (*admin.Admin)(nil)

// WaveSetRequest creates a wave or changes its caps.
type WaveSetRequest struct {
	// WaveID is the wave (1 to 64 of [A-Za-z0-9_-]). Required.
	WaveID string `json:"wave_id"`
	// Tokens and Dollars are the new caps (0 = none); absent ones stay.
	Tokens  *int64   `json:"tokens,omitempty"`
	Dollars *float64 `json:"dollars,omitempty"`
	// Producers, when present, is the new admit list: only these
	// producers' capsules may join the wave ([] : any). Absent keeps it.
	Producers *[]string `json:"producers,omitempty"`
	// By is the operator, logged by the sagad that acts. Required.
	By string `json:"by"`
	// Reason is logged with By.
	Reason string `json:"reason,omitempty"`
}

// WaveCloseRequest closes a wave.
type WaveCloseRequest struct {
	// WaveID is the wave. Required.
	WaveID string `json:"wave_id"`
	// By is the operator, logged by the sagad that acts. Required.
	By string `json:"by"`
	// Reason is logged with By.
	Reason string `json:"reason,omitempty"`
}

// WaveShowRequest names the wave to show.
type WaveShowRequest struct {
	// WaveID is the wave. Required.
	WaveID string `json:"wave_id"`
}

// WaveListReply answers wave.list, sorted by wave id.
type WaveListReply struct {
	Waves []admin.WaveInfo `json:"waves"`
}

// waveListRequest is the (empty) request of wave.list.
type waveListRequest struct{}

// maxDollarsCap bounds a dollar cap (a float beyond it is no amount).
const maxDollarsCap = 1e12

// decodeWaveRequest decodes a wave verb's request; ok is false for other
// verbs.
func decodeWaveRequest(verb string, data []byte) (r any, ok bool, err error) {
	switch verb {
	case VerbWaveSet:
		var w WaveSetRequest
		if err := strict(data, &w); err != nil {
			return nil, true, err
		}
		w.By = cleanBy(w.By)
		err := firstErr(checkWaveID(w.WaveID), checkBy(w.By, true), checkText("reason", w.Reason))
		if err == nil && w.Tokens != nil && *w.Tokens < 0 {
			err = badRequest("tokens %d: want a cap of 0 (none) or more", *w.Tokens)
		}
		if err == nil && w.Dollars != nil && !(*w.Dollars >= 0 && *w.Dollars <= maxDollarsCap) {
			err = badRequest("dollars %v: want a cap of 0 (none) to %g", *w.Dollars, float64(maxDollarsCap))
		}
		if err == nil && w.Producers != nil {
			if len(*w.Producers) > budget.MaxWaveProducers {
				err = badRequest("producers: at most %d", budget.MaxWaveProducers)
			}
			for _, p := range *w.Producers {
				if err == nil && !budget.ValidWaveID(p) {
					err = badRequest("producer %q: want 1 to 64 of [A-Za-z0-9_-]", p)
				}
			}
		}
		return w, true, err
	case VerbWaveClose:
		var w WaveCloseRequest
		if err := strict(data, &w); err != nil {
			return nil, true, err
		}
		w.By = cleanBy(w.By)
		return w, true, firstErr(checkWaveID(w.WaveID), checkBy(w.By, true), checkText("reason", w.Reason))
	case VerbWaveShow:
		var w WaveShowRequest
		if err := strict(data, &w); err != nil {
			return nil, true, err
		}
		return w, true, checkWaveID(w.WaveID)
	case VerbWaveList:
		if len(bytes.TrimSpace(data)) == 0 {
			return waveListRequest{}, true, nil
		}
		var w waveListRequest
		return w, true, strict(data, &w)
	}
	return nil, false, nil
}

func checkWaveID(id string) error {
	if !budget.ValidWaveID(id) {
		return badRequest("wave_id %q: want 1 to 64 of [A-Za-z0-9_-] (the capsule schema's wave_id)", id)
	}
	return nil
}

// serveWave carries out a decoded wave request; ok is false for any other.
func (s *Service) serveWave(ctx context.Context, r any) (reply any, ok bool, err error) {
	switch r.(type) {
	case WaveSetRequest, WaveCloseRequest, WaveShowRequest, waveListRequest:
	default:
		return nil, false, nil
	}
	wa, can := s.a.(WaveActions)
	if !can {
		return nil, true, errors.New("this sagad's admin actions do not include waves")
	}
	switch r := r.(type) {
	case WaveSetRequest:
		info, err := wa.SetWave(ctx, r.WaveID, r.Tokens, r.Dollars, r.Producers)
		if err == nil {
			s.log.Info("admin wave set", "wave", r.WaveID, "tokens_cap", info.TokensCap, "dollars_cap", info.DollarsCap,
				"producers", info.Producers, "by", r.By, "reason", r.Reason)
		}
		return info, true, err
	case WaveCloseRequest:
		info, err := wa.CloseWave(ctx, r.WaveID)
		if err == nil {
			s.log.Info("admin wave close", "wave", r.WaveID, "by", r.By, "reason", r.Reason)
		}
		return info, true, err
	case WaveShowRequest:
		info, err := wa.Wave(ctx, r.WaveID)
		return info, true, err
	}
	list, err := wa.Waves(ctx)
	if list == nil {
		list = []admin.WaveInfo{}
	}
	return WaveListReply{Waves: list}, true, err
}

// SetWave creates a wave or changes its caps, and returns it.
func (c *Client) SetWave(ctx context.Context, r WaveSetRequest) (admin.WaveInfo, error) {
	var w admin.WaveInfo
	return w, c.call(ctx, VerbWaveSet, r, &w)
}

// CloseWave closes a wave, and returns it.
func (c *Client) CloseWave(ctx context.Context, r WaveCloseRequest) (admin.WaveInfo, error) {
	var w admin.WaveInfo
	return w, c.call(ctx, VerbWaveClose, r, &w)
}

// Wave returns one wave.
func (c *Client) Wave(ctx context.Context, waveID string) (admin.WaveInfo, error) {
	var w admin.WaveInfo
	return w, c.call(ctx, VerbWaveShow, WaveShowRequest{WaveID: waveID}, &w)
}

// Waves returns every wave, sorted by id.
func (c *Client) Waves(ctx context.Context) ([]admin.WaveInfo, error) {
	var w WaveListReply
	return w.Waves, c.call(ctx, VerbWaveList, struct{}{}, &w)
}
