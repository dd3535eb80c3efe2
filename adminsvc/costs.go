package adminsvc

import (
	"context"
	"errors"
	"time"

	"github.com/sagad/sagad/costs"
	"github.com/sagad/sagad/store"
)

// VerbCost sums what capsules spent (sagactl cost).
const VerbCost = "cost"

// CostRequest asks for spend grouped one way.
type CostRequest struct {
	// By is the grouping: wave (absent), chain, composition, producer,
	// kind or day.
	By string `json:"by,omitempty"`
	// Since counts only capsules created at or after it (RFC 3339).
	Since *time.Time `json:"since,omitempty"`
	// Limit is how many groups the reply lists, the rest folded into
	// "other": absent or 0 is 50, at most 500.
	Limit int `json:"limit,omitempty"`
}

// CostReply is the spend, grouped ([costs.Report]).
type CostReply = costs.Report

// CostReader sums spend; sagad passes [StoreCosts].
type CostReader func(ctx context.Context, r CostRequest) (CostReply, error)

// StoreCosts is the [CostReader] over st's checkpoints: one read of every
// checkpoint per request, as list does, and of every capsule's kept bytes
// when grouping by kind (the kind is in the capsule, not its checkpoint).
func StoreCosts(st *store.Store) CostReader {
	return func(ctx context.Context, r CostRequest) (CostReply, error) {
		all, err := st.Checkpoints.List(ctx)
		if err != nil {
			return CostReply{}, err
		}
		var kinds map[string]string
		if r.By == costs.ByKind {
			if kinds, err = st.Kinds(ctx); err != nil {
				return CostReply{}, err
			}
		}
		entries := make([]costs.Entry, 0, len(all))
		for _, cp := range all {
			entries = append(entries, costs.Of(cp, kinds[cp.Key]))
		}
		var since time.Time
		if r.Since != nil {
			since = *r.Since
		}
		return costs.Summarise(entries, r.By, since, r.Limit)
	}
}

// WithUnpriced is read with the reply's unpriced_models set to unpriced:
// the models sagad's model endpoints may call that have no price, whose
// calls the dollars of the report do not count.
func WithUnpriced(read CostReader, unpriced []string) CostReader {
	if len(unpriced) == 0 {
		return read
	}
	return func(ctx context.Context, r CostRequest) (CostReply, error) {
		rep, err := read(ctx, r)
		rep.Unpriced = unpriced
		return rep, err
	}
}

func decodeCostRequest(data []byte) (CostRequest, error) {
	var r CostRequest
	if err := strict(data, &r); err != nil {
		return r, err
	}
	if r.By == "" {
		r.By = costs.ByWave
	}
	if !costs.ValidBy(r.By) {
		return r, badRequest("by %q: want one of %v", r.By, costs.Groupings)
	}
	if r.Limit < 0 || r.Limit > costs.MaxGroups {
		return r, badRequest("limit %d: want 0 (the default, %d) to %d", r.Limit, costs.DefaultGroups, costs.MaxGroups)
	}
	return r, nil
}

func (s *Service) serveCost(ctx context.Context, r CostRequest) (CostReply, error) {
	if s.cfg.Costs == nil {
		return CostReply{}, errors.New("this sagad serves no costs")
	}
	return s.cfg.Costs(ctx, r)
}

// Cost sums what capsules spent.
func (c *Client) Cost(ctx context.Context, r CostRequest) (CostReply, error) {
	var out CostReply
	return out, c.call(ctx, VerbCost, r, &out)
}
