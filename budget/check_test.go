package budget_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	caps := capsule.Budget{Tokens: 1000, Dollars: 2}
	tests := []struct {
		name string
		used capsule.Usage
		caps capsule.Budget
		want string
	}{
		{"nothing used", capsule.Usage{}, caps, ""},
		{"within", capsule.Usage{Tokens: 999, Dollars: 1.99}, caps, ""},
		{"exactly at both caps", capsule.Usage{Tokens: 1000, Dollars: 2}, caps, ""},
		{"tokens crossed", capsule.Usage{Tokens: 1001, Dollars: 1}, caps, capsule.BudgetTokens},
		{"dollars crossed", capsule.Usage{Tokens: 10, Dollars: 2.01}, caps, capsule.BudgetDollars},
		{"both crossed names tokens", capsule.Usage{Tokens: 5000, Dollars: 50}, caps, capsule.BudgetTokens},
		{"no dollar cap", capsule.Usage{Tokens: 10, Dollars: 1e9}, capsule.Budget{Tokens: 1000}, ""},
		{"no dollar cap, tokens crossed", capsule.Usage{Tokens: 1001}, capsule.Budget{Tokens: 1000}, capsule.BudgetTokens},
		{"zero token cap is no cap", capsule.Usage{Tokens: 1e9, Dollars: 1}, capsule.Budget{Dollars: 2}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, budget.Check(tt.used, tt.caps))
		})
	}
}

func TestFraction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		used capsule.Usage
		caps capsule.Budget
		want float64
	}{
		{"nothing used", capsule.Usage{}, capsule.Budget{Tokens: 100, Dollars: 1}, 0},
		{"tokens dominate", capsule.Usage{Tokens: 80, Dollars: 0.5}, capsule.Budget{Tokens: 100, Dollars: 1}, 0.8},
		{"dollars dominate", capsule.Usage{Tokens: 10, Dollars: 0.75}, capsule.Budget{Tokens: 100, Dollars: 1}, 0.75},
		{"over a cap", capsule.Usage{Tokens: 150}, capsule.Budget{Tokens: 100, Dollars: 1}, 1.5},
		{"no dollar cap", capsule.Usage{Tokens: 25, Dollars: 99}, capsule.Budget{Tokens: 100}, 0.25},
		{"no caps", capsule.Usage{Tokens: 25, Dollars: 99}, capsule.Budget{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tt.want, budget.Fraction(tt.used, tt.caps), 1e-12)
		})
	}
}
