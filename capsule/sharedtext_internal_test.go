package capsule

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSharedTextBounded: a large document's strings share at most
// maxSharedText bytes of room, so an id kept from it does not keep the whole
// text alive; the strings past the room are allocated alone and read the same.
func TestSharedTextBounded(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1000)
	var b strings.Builder
	b.WriteString(`{"capsule_id":"c-1","notes":[`)
	for i := range 64 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + big + `"`)
	}
	b.WriteString(`],"n":12345}`)
	s := scanner{b: []byte(b.String())}
	v, err := s.document()
	require.NoError(t, err)
	require.LessOrEqual(t, s.texts.Cap(), maxSharedText)
	m := v.(map[string]any)
	require.Equal(t, "c-1", m["capsule_id"])
	notes := m["notes"].([]any)
	require.Len(t, notes, 64)
	for _, n := range notes {
		require.Equal(t, big, n)
	}
	require.Equal(t, "12345", m["n"].(interface{ String() string }).String())
}
