package capsule_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func findings(n, rule int) []capsule.Finding {
	fs := make([]capsule.Finding, n)
	for i := range fs {
		fs[i] = capsule.Finding{Rule: rule, Title: fmt.Sprintf("rule %d", rule), Field: fmt.Sprintf("x[%d]", i), Message: "bad"}
	}
	return fs
}

func TestCapFindings(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 2000) // 4000 bytes

	t.Run("short lists are returned as they are", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{0, 1, 5} {
			fs := findings(n, 7)
			got := capsule.CapFindings(fs, 5)
			require.Equal(t, fs, got)
		}
		require.Nil(t, capsule.CapFindings(nil, 5))
	})

	t.Run("the first n-1 and a count", func(t *testing.T) {
		t.Parallel()
		fs := findings(10_417, 13)
		got := capsule.CapFindings(fs, 6)
		require.Len(t, got, 6)
		require.Equal(t, fs[:5], got[:5])
		require.Equal(t, capsule.Finding{Rule: 13, Title: "rule 13", Message: "… and 10,412 more findings"}, got[5])
		require.Equal(t, "x[0]", fs[0].Field, "the input is not modified")
		require.Len(t, fs, 10_417)
	})

	t.Run("one more", func(t *testing.T) {
		t.Parallel()
		got := capsule.CapFindings(findings(3, 0), 2)
		require.Equal(t, capsule.Finding{Title: "rule 0", Message: "… and 2 more findings"}, got[1])
		got = capsule.CapFindings(findings(3, 4), 1)
		require.Equal(t, []capsule.Finding{{Rule: 4, Title: "rule 4", Message: "… and 3 more findings"}}, got)
		got = capsule.CapFindings(findings(3, 4), 0)
		require.Len(t, got, 1, "n < 1 counts as 1")
	})

	t.Run("a count over several rules names none", func(t *testing.T) {
		t.Parallel()
		fs := append(findings(3, 5), findings(3, 6)...)
		got := capsule.CapFindings(fs, 3)
		require.Equal(t, capsule.Finding{Message: "… and 4 more findings"}, got[2])
		got = capsule.CapFindings(fs, 6)
		require.Equal(t, fs, got)
	})

	t.Run("idempotent", func(t *testing.T) {
		t.Parallel()
		once := capsule.CapFindings(findings(500, 9), capsule.MaxFindings)
		require.Len(t, once, capsule.MaxFindings)
		require.Equal(t, once, capsule.CapFindings(once, capsule.MaxFindings))
	})

	t.Run("long text is cut at a character boundary", func(t *testing.T) {
		t.Parallel()
		fs := []capsule.Finding{{Field: "ok"}, {Field: long, Message: long}, {Field: "f", Message: "m"}}
		got := capsule.CapFindings(fs, 10)
		require.Len(t, got, 3)
		require.Equal(t, fs[0], got[0])
		require.Equal(t, fs[2], got[2])
		require.LessOrEqual(t, len(got[1].Field), capsule.MaxFindingField)
		require.LessOrEqual(t, len(got[1].Message), capsule.MaxFindingMessage)
		require.True(t, utf8.ValidString(got[1].Field) && utf8.ValidString(got[1].Message))
		require.True(t, strings.HasSuffix(got[1].Message, "…"))
		require.Equal(t, long, fs[1].Message, "the input is not modified")
	})
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "…"},
		{"abcdefgh", 6, "abc…"},
		{"ééééé", 7, "éé…"}, // 10 bytes; 4 left for text: two é
		{"ééééé", 6, "é…"},  // 3 left for text: one é and not half of one
		{"\xff\xff\xff\xff\xff\xff", 5, "\xff\xff…"},
	}
	for _, tt := range tests {
		got := capsule.Truncate(tt.s, tt.n)
		require.Equal(t, tt.want, got, "%q %d", tt.s, tt.n)
		require.LessOrEqual(t, len(got), max(tt.n, len("…")))
	}
}

func TestSchemaInvalidIsBounded(t *testing.T) {
	t.Parallel()
	require.Equal(t, "schema_invalid:/,/a,/b", capsule.SchemaInvalid([]string{"/b", "", "/a", "/b"}).String())

	var ptrs []string
	for i := range 100_000 {
		ptrs = append(ptrs, fmt.Sprintf("/depends_on/%d", i))
	}
	ptrs = append(ptrs, "/"+strings.Repeat("k", 100_000))
	h := capsule.SchemaInvalid(ptrs)
	parts := strings.Split(h.Detail, ",")
	require.Len(t, parts, capsule.MaxSchemaPointers+1)
	require.Equal(t, fmt.Sprintf("+%d more", 100_001-capsule.MaxSchemaPointers), parts[len(parts)-1])
	require.Less(t, len(h.String()), capsule.MaxSchemaPointers*300)

	long := capsule.SchemaInvalid([]string{"/" + strings.Repeat("k", 100_000)})
	require.LessOrEqual(t, len(long.Detail), 256)

	for _, h := range []capsule.HaltReason{
		capsule.ExecutorFailed(strings.Repeat("x", 1<<20)), capsule.UnsupportedSchemaVersion(strings.Repeat("9", 1<<20)),
		capsule.ContextRefMissing(strings.Repeat("r", 5000)), capsule.LockUnavailable(strings.Repeat("p", 5000)),
	} {
		require.LessOrEqual(t, len(h.Detail), capsule.MaxReasonDetail, h.Code)
	}
	require.Equal(t, "executor_failed:model refused", capsule.ExecutorFailed("model refused").String())
}

func TestExceededLimit(t *testing.T) {
	t.Parallel()
	many := func(n int) []string { return make([]string, n) }
	tests := []struct {
		field string
		max   int
		set   func(c *capsule.Capsule, n int)
	}{
		{"spec.acceptance_criteria", capsule.MaxAcceptanceCriteria, func(c *capsule.Capsule, n int) { c.Spec.AcceptanceCriteria = many(n) }},
		{"context_refs", capsule.MaxContextRefs, func(c *capsule.Capsule, n int) { c.ContextRefs = many(n) }},
		{"constraints.resource_locks_required", capsule.MaxResourceLocks, func(c *capsule.Capsule, n int) { c.Constraints.ResourceLocksRequired = many(n) }},
		{"constraints.allowed_paths", capsule.MaxAllowedPaths, func(c *capsule.Capsule, n int) { c.Constraints.AllowedPaths = many(n) }},
		{"constraints.forbidden_paths", capsule.MaxForbiddenPaths, func(c *capsule.Capsule, n int) { c.Constraints.ForbiddenPaths = many(n) }},
		{"constraints.network.allow_hosts", capsule.MaxAllowHosts, func(c *capsule.Capsule, n int) { c.Constraints.Network.AllowHosts = many(n) }},
		{"depends_on", capsule.MaxDependsOn, func(c *capsule.Capsule, n int) { c.DependsOn = many(n) }},
	}
	require.Len(t, (&capsule.Capsule{}).ListLimits(), len(tests), "every bounded list has a case")
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			t.Parallel()
			c := new(capsule.Capsule)
			tt.set(c, tt.max)
			_, over := c.ExceededLimit()
			require.False(t, over, "the limit itself is allowed")
			tt.set(c, tt.max+1)
			l, over := c.ExceededLimit()
			require.True(t, over)
			require.Equal(t, capsule.ListLimit{Field: tt.field, Len: tt.max + 1, Max: tt.max}, l)
			require.Equal(t, "capsule_limits_exceeded:"+tt.field, capsule.CapsuleLimitsExceeded(l.Field).String())
		})
	}
}
