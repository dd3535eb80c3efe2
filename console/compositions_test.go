package console

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/rules"
)

// TestCompositionsAPI: /ui/api/compositions lists the runs and
// /ui/api/compositions/{id} gives a run's steps with their needs (the
// graph's edges) and capsule ids (the nodes' links); an unknown id is 404,
// a bad run 400, and without sagad's admin service the pages say so.
func TestCompositionsAPI(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	svc, err := compose.Start(f.nc, f.st, compose.Config{Logger: testLogger(t), Rules: rules.Config{}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop()) })
	steps := []any{}
	for _, s := range []struct {
		name  string
		needs []string
	}{{"draft", nil}, {"fr", []string{"draft"}}, {"de", []string{"draft"}}, {"merge", []string{"fr", "de"}}} {
		st := map[string]any{"name": s.name, "capsule": map[string]any(capsuletest.New().Delete("capsule_id").Set("task.title", s.name))}
		if s.needs != nil {
			st["needs"] = s.needs
		}
		steps = append(steps, st)
	}
	doc, err := json.Marshal(map[string]any{"composition_id": "fan", "steps": steps})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := compose.Publish(ctx, f.nc, doc)
	require.NoError(t, err)

	var l CompositionsView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/compositions", &l))
	require.True(t, l.Available, l.Message)
	require.Len(t, l.Compositions, 1)
	require.Equal(t, "fan", l.Compositions[0].CompositionID)
	require.Equal(t, 4, l.Compositions[0].Summary.Total)

	var v CompositionView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/compositions/fan?producer=-&run=1", &v))
	require.True(t, v.Available, v.Message)
	require.Len(t, v.Outcome.Steps, 4)
	for i, s := range v.Outcome.Steps {
		require.Equal(t, r.Steps[i].CapsuleID, s.CapsuleID)
	}
	require.Nil(t, v.Outcome.Steps[0].Needs)
	require.Equal(t, []string{"fr", "de"}, v.Outcome.Steps[3].Needs)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/compositions/fan", &v))
	require.Equal(t, http.StatusNotFound, f.get(t, "/ui/api/compositions/nope", nil))
	require.Equal(t, http.StatusBadRequest, f.get(t, "/ui/api/compositions/fan?run=x", nil))

	off := setupWith(t, Config{}, false)
	require.Equal(t, http.StatusOK, off.get(t, "/ui/api/compositions", &l))
	require.False(t, l.Available)
	require.Contains(t, l.Message, "composition.list")
	require.Equal(t, http.StatusOK, off.get(t, "/ui/api/compositions/fan", &v))
	require.False(t, v.Available)
}
