package compose

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/store"
)

// ErrAmbiguous: several producers have a chain of the id asked for, and
// the request named none of them.
var ErrAmbiguous = errors.New("chain id used by several producers")

// maxProducersListed bounds the chains of one id a view looks at.
const maxProducersListed = 32

// View returns the steps of a chain as `sagactl chain` shows them: the
// chain of id chainID of producer when producer is not nil ("" is sagad's
// own account), else the only producer's chain of that id. Every step is
// listed, with the state of its checkpoint (a step RECEPTION has not
// received yet shows state "pending").
func View(ctx context.Context, st *store.Store, chainID string, producer *string) (client.Chain, error) {
	out := client.Chain{ChainID: chainID, Steps: []client.ChainStep{}}
	if st.Compositions == nil {
		return out, fmt.Errorf("%w: no chain %s", store.ErrNotFound, chainID)
	}
	var rec *Record
	if producer != nil {
		r, err := Get(ctx, st, chainID, *producer)
		if err != nil {
			return out, err
		}
		rec = r
	} else {
		recs, err := producers(ctx, st, chainID, maxProducersListed)
		if err != nil {
			return out, err
		}
		switch len(recs) {
		case 0:
			return out, fmt.Errorf("%w: no chain %s", store.ErrNotFound, chainID)
		case 1:
			rec = recs[0]
		default:
			names := make([]string, len(recs))
			for i, r := range recs {
				names[i] = r.Producer
				if names[i] == "" {
					names[i] = "-"
				}
			}
			sort.Strings(names)
			return out, fmt.Errorf("%w: chain %s exists for producers %s: name one", ErrAmbiguous, chainID, strings.Join(names, ", "))
		}
	}
	out.Producer = rec.Producer
	for i, id := range rec.Steps {
		s := client.ChainStep{Step: i, CapsuleID: id, State: "pending"}
		cp, _, err := st.Checkpoints.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return out, err
		case cp.Digest != rec.StepDigests[i] || cp.Producer != rec.Producer:
			// Not the capsule sagad published for the step: say so
			// rather than show another capsule's state as the step's.
			s.State = StepForeign
		default:
			s.State, s.Phase, s.PhaseName = cp.State.Status, int(cp.State.Phase), cp.State.PhaseName
			s.HaltReason, s.WaitingFor = cp.State.HaltReason, cp.State.WaitingFor
			if _, c, err := st.Raw(ctx, id); err == nil && c != nil {
				s.Kind = c.Task.Kind
			}
		}
		out.Steps = append(out.Steps, s)
	}
	return out, nil
}
