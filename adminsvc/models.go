package adminsvc

import (
	"context"
	"errors"

	"github.com/sagad/sagad/executors"
)

// VerbModels reports the model tiers and prices in force (sagactl models):
// its request is empty, as rules'.
const VerbModels = "models"

// ModelsReply answers saga.admin.models: the tiers, prices, unpriced
// models and model endpoints of the answering sagad's config, without any
// API key or header.
type ModelsReply = executors.ModelsReport

func (s *Service) serveModels() (ModelsReply, error) {
	if s.cfg.Models == nil {
		return ModelsReply{}, errors.New("this sagad reports no models")
	}
	return *s.cfg.Models, nil
}

// Models reports the model tiers and prices the answering sagad is
// configured with, its unpriced models and its model endpoints.
func (c *Client) Models(ctx context.Context) (ModelsReply, error) {
	var r ModelsReply
	return r, c.call(ctx, VerbModels, struct{}{}, &r)
}
