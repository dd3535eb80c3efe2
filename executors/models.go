package executors

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Models is sagad's "models" config: the tiers a capsule's task.model or an
// endpoint's model may name, and the price of each model id.
//
//	"models": {
//	  "tiers":  {"low-tier": "gpt-4.1-mini", "high-tier": "claude-sonnet-4-5"},
//	  "prices": {"gpt-4.1-mini": {"input_per_mtok": 0.4, "output_per_mtok": 1.6}}
//	}
//
// A model id without a price charges tokens only (sagad warns once at
// start, and sagactl models says so).
type Models struct {
	// Tiers maps a tier name ("low-tier", "medium-tier", "high-tier" or any
	// other) to a model id.
	Tiers map[string]string `json:"tiers,omitzero"`
	// Prices maps a model id, as sent to the API, to its price.
	Prices map[string]Price `json:"prices,omitzero"`
}

// Price is a model's price in dollars per million tokens. Cache reads and
// writes cost as input unless their own price is set.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
	// CacheReadPerMTok prices the input tokens the API read from its
	// prompt cache (OpenAI's cached_tokens, Anthropic's
	// cache_read_input_tokens).
	CacheReadPerMTok *float64 `json:"cache_read_per_mtok,omitempty"`
	// CacheWritePerMTok prices Anthropic's cache_creation_input_tokens.
	CacheWritePerMTok *float64 `json:"cache_write_per_mtok,omitempty"`
}

// ErrModelNotAllowed is wrapped by the error [Models.Allowed] returns.
var ErrModelNotAllowed = errors.New("model not allowed")

// tierSuffix marks a name as a tier: a name ending in it must be one of the
// configured tiers, so that a typo never goes to the API as a model id.
const tierSuffix = "-tier"

// Validate reports every problem of m at once.
func (m Models) Validate() error {
	var errs []error
	for _, name := range sortedNames(m.Tiers) {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("models.tiers: a tier name must not be empty"))
		}
		if strings.TrimSpace(m.Tiers[name]) == "" {
			errs = append(errs, fmt.Errorf("models.tiers[%q]: the model id must not be empty", name))
		}
		if _, isTier := m.Tiers[m.Tiers[name]]; isTier {
			errs = append(errs, fmt.Errorf("models.tiers[%q]: %q is a tier, not a model id", name, m.Tiers[name]))
		}
	}
	for _, id := range sortedNames(m.Prices) {
		p := m.Prices[id]
		if strings.TrimSpace(id) == "" {
			errs = append(errs, errors.New("models.prices: a model id must not be empty"))
		}
		for _, f := range []struct {
			name string
			v    *float64
		}{{"input_per_mtok", &p.InputPerMTok}, {"output_per_mtok", &p.OutputPerMTok}, {"cache_read_per_mtok", p.CacheReadPerMTok}, {"cache_write_per_mtok", p.CacheWritePerMTok}} {
			if f.v != nil && (*f.v < 0 || math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
				errs = append(errs, fmt.Errorf("models.prices[%q].%s: %v must be a finite number ≥ 0", id, f.name, *f.v))
			}
		}
	}
	return errors.Join(errs...)
}

// Resolve is the model id name stands for: a tier's id, else name itself.
func (m Models) Resolve(name string) string {
	if id, ok := m.Tiers[name]; ok {
		return id
	}
	return name
}

// Allowed says whether a capsule's task.model may ask for name: a
// configured tier, or a model id one of the tiers names or the prices list.
// Otherwise the error wraps [ErrModelNotAllowed] and says what is allowed.
func (m Models) Allowed(name string) error {
	if _, ok := m.Tiers[name]; ok {
		return nil
	}
	if _, ok := m.Prices[name]; ok && !strings.HasSuffix(name, tierSuffix) {
		return nil
	}
	for _, id := range m.Tiers {
		if id == name {
			return nil
		}
	}
	what := "an unknown model id"
	if strings.HasSuffix(name, tierSuffix) {
		what = "an unknown tier"
	}
	allowed := m.Names()
	if len(allowed) == 0 {
		return fmt.Errorf("%w: %q is %s, and sagad's config has no models (tiers or prices)", ErrModelNotAllowed, name, what)
	}
	return fmt.Errorf("%w: %q is %s; allowed: %s", ErrModelNotAllowed, name, what, strings.Join(allowed, ", "))
}

// Names lists, sorted, every tier and model id a task.model may name.
func (m Models) Names() []string {
	var out []string
	for t, id := range m.Tiers {
		out = append(out, t, id)
	}
	for id := range m.Prices {
		out = append(out, id)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Unpriced lists, sorted, the model ids among ids and the tiers' that have
// no price: calls to them charge tokens only.
func (m Models) Unpriced(ids ...string) []string {
	var out []string
	for _, id := range append(slices.Clone(ids), valuesOf(m.Tiers)...) {
		if _, ok := m.Prices[id]; !ok && id != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TokenUsage is a model call's usage as its API reported it.
type TokenUsage struct {
	// Input counts every input token, the cached ones included.
	Input int64
	// Output counts the completion's tokens.
	Output int64
	// CacheRead is the part of Input read from the API's prompt cache.
	CacheRead int64
	// CacheWrite is the part of Input written to it (Anthropic).
	CacheWrite int64
}

// Tokens is the usage's total: input (cache reads and writes included) and
// output.
func (u TokenUsage) Tokens() int64 { return u.Input + u.Output }

// Cost is what u costs with model id's price; priced is false when id has
// none (the cost is 0 then).
func (m Models) Cost(id string, u TokenUsage) (dollars float64, priced bool) {
	p, ok := m.Prices[id]
	if !ok {
		return 0, false
	}
	cacheRead, cacheWrite := p.InputPerMTok, p.InputPerMTok
	if p.CacheReadPerMTok != nil {
		cacheRead = *p.CacheReadPerMTok
	}
	if p.CacheWritePerMTok != nil {
		cacheWrite = *p.CacheWritePerMTok
	}
	plain := max(u.Input-u.CacheRead-u.CacheWrite, 0)
	d := float64(plain)*p.InputPerMTok + float64(u.CacheRead)*cacheRead +
		float64(u.CacheWrite)*cacheWrite + float64(u.Output)*p.OutputPerMTok
	return d / 1e6, true
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func valuesOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// SetModels sets the models config task.model is judged and resolved by
// (RECEPTION's model_not_allowed, sagactl models).
func (r *Registry) SetModels(m Models) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.models = m
}

// Models is the models config set with [Registry.SetModels]; the zero
// Models (nothing allowed) when none was.
func (r *Registry) Models() Models {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.models
}

// UnpricedModels lists, sorted, the model ids c's model endpoints and tiers
// may call that have no price (sagad warns of each once at start).
func (c Config) UnpricedModels() []string {
	var ids []string
	for _, m := range []map[string]Endpoint{c.Executors, c.Reviewers} {
		for _, ep := range m {
			if ep.Type == EndpointOpenAI || ep.Type == EndpointAnthropic {
				ids = append(ids, c.Models.Resolve(ep.Model))
			}
		}
	}
	return c.Models.Unpriced(ids...)
}
