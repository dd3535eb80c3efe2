package adminsvc

import (
	"context"
	"errors"
	"regexp"

	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/store"
)

// VerbChain shows a chain's steps (sagactl chain).
const VerbChain = "chain"

// ChainRequest names the chain to show.
type ChainRequest struct {
	// ChainID is the chain's id (chain.schema.json's chain_id). Required.
	ChainID string `json:"chain_id"`
	// Producer is whose chain (chain ids are per producer; "" is sagad's
	// own account). Absent: the only producer with a chain of that id.
	Producer *string `json:"producer,omitempty"`
}

// ChainReader reads chains; sagad passes one over its store
// ([compose.View]).
type ChainReader func(ctx context.Context, chainID string, producer *string) (client.Chain, error)

// StoreChains is the [ChainReader] over st.
func StoreChains(st *store.Store) ChainReader {
	return func(ctx context.Context, chainID string, producer *string) (client.Chain, error) {
		return compose.View(ctx, st, chainID, producer)
	}
}

var chainIDForm = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func decodeChainRequest(data []byte) (ChainRequest, error) {
	var r ChainRequest
	if err := strict(data, &r); err != nil {
		return r, err
	}
	if !chainIDForm.MatchString(r.ChainID) {
		return r, badRequest("chain_id must be 1 to 128 of [A-Za-z0-9._-], starting with a letter or digit")
	}
	if r.Producer != nil && !store.ValidProducer(*r.Producer) {
		return r, badRequest("producer must be up to 64 of [A-Za-z0-9_-]")
	}
	return r, nil
}

func (s *Service) serveChain(ctx context.Context, r ChainRequest) (client.Chain, error) {
	if s.cfg.Chains == nil {
		return client.Chain{}, errors.New("this sagad serves no chains")
	}
	return s.cfg.Chains(ctx, r.ChainID, r.Producer)
}

// Chain shows a chain's steps.
func (c *Client) Chain(ctx context.Context, r ChainRequest) (client.Chain, error) {
	var out client.Chain
	return out, c.call(ctx, VerbChain, r, &out)
}
