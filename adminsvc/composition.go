package adminsvc

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/store"
)

// Composition verbs (sagactl composition status|list|cancel).
const (
	VerbCompositionStatus = "composition.status"
	VerbCompositionList   = "composition.list"
	VerbCompositionCancel = "composition.cancel"
	VerbCompositionPause  = "composition.pause"
	VerbCompositionResume = "composition.resume"
	VerbCompositionReplay = "composition.replay"
	VerbCompositionDecide = "composition.decide"
)

// CompositionVerbs are the composition verbs.
var CompositionVerbs = []string{VerbCompositionStatus, VerbCompositionList, VerbCompositionCancel, VerbCompositionPause, VerbCompositionResume, VerbCompositionReplay, VerbCompositionDecide}

// CompositionRequest names a composition run: the latest run unless Run
// is given; the only producer's composition of that id unless Producer is.
type CompositionRequest struct {
	CompositionID string  `json:"composition_id"`
	Producer      *string `json:"producer,omitempty"`
	Run           int     `json:"run,omitempty"`
}

// CompositionCancelRequest cancels a run (every step not ended is
// cancelled, none starts), pauses it or resumes it.
type CompositionCancelRequest struct {
	CompositionID string  `json:"composition_id"`
	Producer      *string `json:"producer,omitempty"`
	Run           int     `json:"run,omitempty"`
	By            string  `json:"by"`
	Reason        string  `json:"reason,omitempty"`
	verb          string
}

func (r CompositionCancelRequest) run() CompositionRequest {
	return CompositionRequest{CompositionID: r.CompositionID, Producer: r.Producer, Run: r.Run}
}

// CompositionDecideRequest decides on a step held at its operator gate:
// accept starts it, reject halts it operator_rejected and the steps
// needing it halt dependency_failed.
type CompositionDecideRequest struct {
	CompositionID string  `json:"composition_id"`
	Producer      *string `json:"producer,omitempty"`
	Run           int     `json:"run,omitempty"`
	Step          string  `json:"step"`
	Decision      string  `json:"decision"`
	By            string  `json:"by"`
	Reason        string  `json:"reason,omitempty"`
}

// Decisions of a [CompositionDecideRequest].
const (
	GateAccept = "accept"
	GateReject = "reject"
)

// CompositionListRequest lists composition runs, newest first.
type CompositionListRequest struct {
	// Limit bounds the runs listed. Defaults to 100, at most 1000.
	Limit int `json:"limit,omitempty"`
	// State keeps only the runs in that state (running, paused,
	// completed, failed, partial, cancelled).
	State string `json:"state,omitempty"`
	// Producer keeps only that producer's runs ("" sagad's own); absent
	// keeps every producer's.
	Producer *string `json:"producer,omitempty"`
}

// compositionStates are the states a list may select.
var compositionStates = []string{compose.StateRunning, compose.StatePaused, compose.StateCompleted,
	compose.StateFailed, compose.StatePartial, compose.StateCancelled}

// maxCompositionsScanned bounds the runs a list reads to select and order
// the newest: every run, on any sagad this side of a retention policy.
const maxCompositionsScanned = 10000

// CompositionListReply lists composition runs.
type CompositionListReply struct {
	Compositions []compose.Listed `json:"compositions"`
}

// Compositions serves the composition verbs over a store.
type Compositions struct {
	st *store.Store
	a  *admin.Admin
}

// StoreCompositions is sagad's [Compositions]: records in st, steps
// cancelled through a.
func StoreCompositions(st *store.Store, a *admin.Admin) *Compositions {
	return &Compositions{st: st, a: a}
}

func decodeCompositionRequest(verb string, data []byte) (any, bool, error) {
	check := func(r CompositionRequest) error {
		if !chainIDForm.MatchString(r.CompositionID) {
			return badRequest("composition_id must be 1 to 128 of [A-Za-z0-9._-], starting with a letter or digit")
		}
		if r.Producer != nil && !store.ValidProducer(*r.Producer) {
			return badRequest("producer must be up to 64 of [A-Za-z0-9_-]")
		}
		if r.Run < 0 {
			return badRequest("run %d: runs count from 1", r.Run)
		}
		return nil
	}
	switch verb {
	case VerbCompositionStatus:
		var r CompositionRequest
		if err := strict(data, &r); err != nil {
			return nil, true, err
		}
		return r, true, check(r)
	case VerbCompositionCancel, VerbCompositionPause, VerbCompositionResume, VerbCompositionReplay:
		var r CompositionCancelRequest
		if err := strict(data, &r); err != nil {
			return nil, true, err
		}
		r.By = cleanBy(r.By)
		r.verb = verb
		return r, true, firstErr(check(r.run()), checkBy(r.By, true), checkText("reason", r.Reason))
	case VerbCompositionDecide:
		var r CompositionDecideRequest
		if err := strict(data, &r); err != nil {
			return nil, true, err
		}
		r.By = cleanBy(r.By)
		var bad error
		switch {
		case r.Step == "" || len(r.Step) > 128:
			bad = badRequest("step must name a step of the composition (1 to 128 characters)")
		case r.Decision != GateAccept && r.Decision != GateReject:
			bad = badRequest("decision %q: want accept or reject", r.Decision)
		}
		return r, true, firstErr(check(CompositionRequest{CompositionID: r.CompositionID, Producer: r.Producer, Run: r.Run}), bad, checkBy(r.By, true), checkText("reason", r.Reason))
	case VerbCompositionList:
		var r CompositionListRequest
		if err := strict(data, &r); err != nil {
			return nil, true, err
		}
		switch {
		case r.Limit < 0 || r.Limit > 1000:
			return nil, true, badRequest("limit %d: want 0 (100) to 1000", r.Limit)
		case r.State != "" && !slices.Contains(compositionStates, r.State):
			return nil, true, badRequest("state %q: want one of %s", r.State, strings.Join(compositionStates, ", "))
		case r.Producer != nil && !store.ValidProducer(*r.Producer):
			return nil, true, badRequest("producer %q: want 1 to 64 of [A-Za-z0-9_-], or empty for sagad's own", *r.Producer)
		}
		return r, true, nil
	}
	return nil, false, nil
}

func (s *Service) serveComposition(ctx context.Context, r any) (any, bool, error) {
	switch r.(type) {
	case CompositionRequest, CompositionCancelRequest, CompositionListRequest, CompositionDecideRequest:
	default:
		return nil, false, nil
	}
	c := s.cfg.Compositions
	if c == nil {
		return nil, true, errors.New("this sagad serves no compositions")
	}
	switch r := r.(type) {
	case CompositionRequest:
		rec, err := compose.Find(ctx, c.st, r.CompositionID, r.Producer, r.Run)
		if err != nil {
			return nil, true, err
		}
		return compose.Status(ctx, c.st, rec), true, nil
	case CompositionCancelRequest:
		rec, err := compose.Find(ctx, c.st, r.CompositionID, r.Producer, r.Run)
		if err != nil {
			return nil, true, err
		}
		switch r.verb {
		case VerbCompositionPause:
			rec, err = compose.Pause(ctx, c.st, func(ctx context.Context, id, reason, by string) error {
				_, err := c.a.Pause(ctx, id, reason, by)
				return err
			}, rec, r.By, r.Reason)
		case VerbCompositionResume:
			rec, err = compose.Resume(ctx, c.st, func(ctx context.Context, id, reason, by string) error {
				_, err := c.a.Resume(ctx, id, admin.ResumeOptions{By: by, Reason: reason})
				return err
			}, rec, r.By, r.Reason)
		case VerbCompositionReplay:
			rec, err = compose.Replay(ctx, c.st, func(ctx context.Context, id, reason, by string) error {
				_, err := c.a.Replay(ctx, id, admin.ReplayOptions{By: by, Reason: reason, Dependents: true})
				return err
			}, rec, r.By, r.Reason)
		default:
			rec, err = compose.Cancel(ctx, c.st, func(ctx context.Context, id, reason, by string) error {
				_, err := c.a.Cancel(ctx, id, reason, by)
				return err
			}, rec, r.By, r.Reason)
		}
		if err != nil {
			return nil, true, err
		}
		s.log.Info("admin "+r.verb, "composition_id", rec.CompositionID, "producer", rec.Producer, "run", rec.RunOf(), "by", r.By, "reason", r.Reason)
		return compose.Status(ctx, c.st, rec), true, nil
	case CompositionDecideRequest:
		rec, err := compose.Find(ctx, c.st, r.CompositionID, r.Producer, r.Run)
		if err != nil {
			return nil, true, err
		}
		rec, err = compose.Decide(ctx, c.st, func(ctx context.Context, id, reason, by string) error {
			_, err := c.a.Resume(ctx, id, admin.ResumeOptions{By: by, Reason: reason})
			return err
		}, func(ctx context.Context, id, reason, by string) error {
			_, err := c.a.Decide(ctx, id, admin.DecisionReject, reason, by)
			return err
		}, rec, r.Step, r.Decision == GateAccept, r.By, r.Reason)
		if err != nil {
			return nil, true, err
		}
		s.log.Info("admin "+VerbCompositionDecide, "composition_id", rec.CompositionID, "producer", rec.Producer, "run", rec.RunOf(),
			"step", r.Step, "decision", r.Decision, "by", r.By, "reason", r.Reason)
		return compose.Status(ctx, c.st, rec), true, nil
	case CompositionListRequest:
		list, err := compose.List(ctx, c.st, maxCompositionsScanned)
		if err != nil {
			return nil, true, err
		}
		return CompositionListReply{Compositions: selectRuns(list, r)}, true, nil
	}
	return nil, false, nil
}

// CompositionStatus shows a composition run's manifest.
func (c *Client) CompositionStatus(ctx context.Context, r CompositionRequest) (compose.Outcome, error) {
	var out compose.Outcome
	return out, c.call(ctx, VerbCompositionStatus, r, &out)
}

// CompositionCancel cancels a composition run.
func (c *Client) CompositionCancel(ctx context.Context, r CompositionCancelRequest) (compose.Outcome, error) {
	var out compose.Outcome
	return out, c.call(ctx, VerbCompositionCancel, r, &out)
}

// CompositionPause pauses a composition run.
func (c *Client) CompositionPause(ctx context.Context, r CompositionCancelRequest) (compose.Outcome, error) {
	var out compose.Outcome
	return out, c.call(ctx, VerbCompositionPause, r, &out)
}

// CompositionResume resumes a paused composition run.
func (c *Client) CompositionResume(ctx context.Context, r CompositionCancelRequest) (compose.Outcome, error) {
	var out compose.Outcome
	return out, c.call(ctx, VerbCompositionResume, r, &out)
}

// CompositionReplay replays the failed steps of an ended composition run
// and their dependents, as a new round.
func (c *Client) CompositionReplay(ctx context.Context, r CompositionCancelRequest) (compose.Outcome, error) {
	var out compose.Outcome
	return out, c.call(ctx, VerbCompositionReplay, r, &out)
}

// CompositionList lists composition runs.
func (c *Client) CompositionList(ctx context.Context, r CompositionListRequest) (CompositionListReply, error) {
	var out CompositionListReply
	return out, c.call(ctx, VerbCompositionList, r, &out)
}

// CompositionDecide decides on a composition step held at its operator
// gate.
func (c *Client) CompositionDecide(ctx context.Context, r CompositionDecideRequest) (compose.Outcome, error) {
	var out compose.Outcome
	return out, c.call(ctx, VerbCompositionDecide, r, &out)
}

// selectRuns is what a list request r selects of list: the runs in its
// state and of its producer, newest first (then by id, producer and run),
// at most its limit.
func selectRuns(list []compose.Listed, r CompositionListRequest) []compose.Listed {
	limit := r.Limit
	if limit == 0 {
		limit = 100
	}
	list = slices.DeleteFunc(list, func(l compose.Listed) bool {
		return (r.State != "" && l.State != r.State) || (r.Producer != nil && l.Producer != *r.Producer)
	})
	slices.SortStableFunc(list, func(a, b compose.Listed) int { return b.CreatedAt.Compare(a.CreatedAt) })
	if len(list) > limit {
		list = list[:limit]
	}
	return list
}
