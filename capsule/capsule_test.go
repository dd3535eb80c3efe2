package capsule_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func TestUsageValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		u    capsule.Usage
		want string // "" means valid
	}{
		{"zero", capsule.Usage{}, ""},
		{"ordinary", capsule.Usage{Tokens: 1200, Dollars: 0.02}, ""},
		{"negative zero dollars", capsule.Usage{Dollars: math.Copysign(0, -1)}, ""},
		{"negative tokens", capsule.Usage{Tokens: -1}, "invalid usage: -1 tokens / 0 dollars: tokens must not be negative"},
		{"negative dollars", capsule.Usage{Tokens: 5, Dollars: -0.5}, "invalid usage: 5 tokens / -0.5 dollars: dollars must not be negative"},
		{"NaN dollars", capsule.Usage{Dollars: math.NaN()}, "invalid usage: 0 tokens / NaN dollars: dollars must be a finite number"},
		{"infinite dollars", capsule.Usage{Dollars: math.Inf(1)}, "invalid usage: 0 tokens / +Inf dollars: dollars must be a finite number"},
		{"negative infinity", capsule.Usage{Dollars: math.Inf(-1)}, "invalid usage: 0 tokens / -Inf dollars: dollars must be a finite number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.u.Validate()
			require.Equal(t, tt.want == "", tt.u.Valid())
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, capsule.ErrInvalidUsage)
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestHaltCodesAreUnique(t *testing.T) {
	t.Parallel()
	seen := map[capsule.HaltCode]bool{}
	for _, c := range capsule.HaltCodes {
		require.False(t, seen[c], "%s listed twice", c)
		seen[c] = true
	}
	require.True(t, seen[capsule.CodeBudgetDollarsNonPositive])
	require.Equal(t, "budget_dollars_non_positive", capsule.BudgetDollarsNonPositive().String())
}
