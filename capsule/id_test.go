package capsule_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func TestCanonicalID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"5a6a0000-0000-4000-8000-00000000000f", "5a6a0000-0000-4000-8000-00000000000f", true},
		{"5A6A0000-0000-4000-8000-00000000000F", "5a6a0000-0000-4000-8000-00000000000f", true},
		{"5a6A0000-0000-4000-8000-00000000000F", "5a6a0000-0000-4000-8000-00000000000f", true},
		{"01HZY8J6Q4W3V0D7T1N9K2M5PC", "01HZY8J6Q4W3V0D7T1N9K2M5PC", true},
		{"01hzy8j6q4w3v0d7t1n9k2m5pc", "01HZY8J6Q4W3V0D7T1N9K2M5PC", true},
		{"7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", true},
		// Not capsule ids: returned as they are.
		{"", "", false},
		{"capsule-42", "capsule-42", false},
		{"5a6a0000-0000-4000-8000-00000000000g", "5a6a0000-0000-4000-8000-00000000000g", false},
		{"5a6a0000_0000-4000-8000-00000000000f", "5a6a0000_0000-4000-8000-00000000000f", false},
		{"5a6a00000000-4000-8000-00000000000f0", "5a6a00000000-4000-8000-00000000000f0", false},
		{"8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ", false}, // overflows 128 bits
		{"01HZY8J6Q4W3V0D7T1N9K2M5PI", "01HZY8J6Q4W3V0D7T1N9K2M5PI", false}, // I is not Crockford
		{"01hzy8j6q4w3v0d7t1n9k2m5pu", "01hzy8j6q4w3v0d7t1n9k2m5pu", false}, // nor u
		{"01HZY8J6Q4W3V0D7T1N9K2M5P-", "01HZY8J6Q4W3V0D7T1N9K2M5P-", false},
	}
	for _, tt := range tests {
		got, ok := capsule.CanonicalID(tt.in)
		require.Equal(t, tt.ok, ok, tt.in)
		require.Equal(t, tt.want, got, tt.in)
		if ok {
			again, _ := capsule.CanonicalID(got)
			require.Equal(t, got, again, "canonical form is a fixed point")
		}
	}
}

func TestCanonicalizeIDs(t *testing.T) {
	t.Parallel()
	var c capsule.Capsule
	require.NoError(t, json.Unmarshal([]byte(`{
		"capsule_id": "5A6A0000-0000-4000-8000-00000000000F",
		"depends_on": ["01hzy8j6q4w3v0d7t1n9k2m5pc", "not-an-id", "5a6a0000-0000-4000-8000-0000000000AA"]
	}`), &c))
	c.Canonicalize()
	require.Equal(t, "5a6a0000-0000-4000-8000-00000000000f", c.CapsuleID)
	require.Equal(t, []string{"01HZY8J6Q4W3V0D7T1N9K2M5PC", "not-an-id", "5a6a0000-0000-4000-8000-0000000000aa"}, c.DependsOn)

	junk := capsule.Capsule{CapsuleID: "x"}
	junk.Canonicalize()
	require.Equal(t, "x", junk.CapsuleID)
}
