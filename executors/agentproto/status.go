package agentproto

import (
	"encoding/json"
	"math"
	"strings"
)

// Usage is what a status chunk reports of a call's cost: the Claude Code
// host's `cost:{"turn_cost_usd": X, …}` or `usage:{"input_tokens": N,
// "output_tokens": M}`.
type Usage struct {
	// Dollars is turn_cost_usd, HasDollars whether it was reported.
	Dollars    float64
	HasDollars bool
	// Tokens is input_tokens + output_tokens, HasTokens whether either was
	// reported.
	Tokens    int64
	HasTokens bool
}

// maxUsageTokens bounds one report's tokens, so a sum cannot overflow.
const maxUsageTokens = 1 << 50

// ParseStatusUsage reads a status token. ok is false for every token that
// is no usable cost or usage report (ack, anything else, a malformed or
// negative report): such tokens pass through, they never charge.
func ParseStatusUsage(status string) (u Usage, ok bool) {
	name, body, found := strings.Cut(status, ":")
	if !found {
		return Usage{}, false
	}
	switch strings.TrimSpace(name) {
	case "cost":
		var c struct {
			Turn *float64 `json:"turn_cost_usd"`
		}
		if json.Unmarshal([]byte(body), &c) != nil || c.Turn == nil {
			return Usage{}, false
		}
		if math.IsNaN(*c.Turn) || math.IsInf(*c.Turn, 0) || *c.Turn < 0 || *c.Turn > 1e9 {
			return Usage{}, false
		}
		return Usage{Dollars: *c.Turn, HasDollars: true}, true
	case "usage":
		var c struct {
			In  *int64 `json:"input_tokens"`
			Out *int64 `json:"output_tokens"`
		}
		if json.Unmarshal([]byte(body), &c) != nil || (c.In == nil && c.Out == nil) {
			return Usage{}, false
		}
		var n int64
		for _, p := range []*int64{c.In, c.Out} {
			if p == nil {
				continue
			}
			if *p < 0 || *p > maxUsageTokens {
				return Usage{}, false
			}
			n += *p
		}
		return Usage{Tokens: n, HasTokens: true}, true
	}
	return Usage{}, false
}
