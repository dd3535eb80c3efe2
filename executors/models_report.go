package executors

import (
	"net/url"
	"slices"
)

// ModelsReport is what `sagactl models -o json` prints and what
// saga.admin.models answers: the tiers and prices of a config, the models
// without a price, and the model endpoints. It holds no secret: of an
// endpoint only its type, model and base URL (without any user
// information), never its API key, key file or headers.
type ModelsReport struct {
	Tiers  map[string]string `json:"tiers"`
	Prices map[string]Price  `json:"prices"`
	// Unpriced are the model ids the tiers and model endpoints may call
	// that have no price: their calls charge tokens only.
	Unpriced []string `json:"unpriced"`
	// Endpoints are the model endpoints, by role and key, with the model
	// id each calls by default.
	Endpoints []ModelEndpoint `json:"endpoints"`
}

// ModelEndpoint is one model endpoint of a [ModelsReport].
type ModelEndpoint struct {
	Role  string `json:"role"`
	Key   string `json:"key"`
	Type  string `json:"type"`
	Model string `json:"model"`
	// ModelID is Model with its tier resolved.
	ModelID string `json:"model_id"`
	// BaseURL is the endpoint's base_url without user information; absent
	// when the endpoint names none (the API's own address).
	BaseURL string `json:"base_url,omitempty"`
}

// ModelsReport describes the models of c: its tiers and prices, the
// models without a price, and its model endpoints (executors first, each
// role by key).
func (c Config) ModelsReport() ModelsReport {
	rep := ModelsReport{Tiers: c.Models.Tiers, Prices: c.Models.Prices, Unpriced: c.UnpricedModels(), Endpoints: []ModelEndpoint{}}
	if rep.Tiers == nil {
		rep.Tiers = map[string]string{}
	}
	if rep.Prices == nil {
		rep.Prices = map[string]Price{}
	}
	if rep.Unpriced == nil {
		rep.Unpriced = []string{}
	}
	for _, role := range []struct {
		name string
		m    map[string]Endpoint
	}{{"executor", c.Executors}, {"reviewer", c.Reviewers}} {
		keys := make([]string, 0, len(role.m))
		for k := range role.m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, key := range keys {
			ep := role.m[key]
			if ep.Type == EndpointOpenAI || ep.Type == EndpointAnthropic {
				rep.Endpoints = append(rep.Endpoints, ModelEndpoint{Role: role.name, Key: key, Type: ep.Type, Model: ep.Model,
					ModelID: c.Models.Resolve(ep.Model), BaseURL: withoutUserinfo(ep.BaseURL)})
			}
		}
	}
	return rep
}

// withoutUserinfo drops the user and password of a URL; a URL that does
// not parse is left out rather than shown.
func withoutUserinfo(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	u.User = nil
	return u.String()
}
