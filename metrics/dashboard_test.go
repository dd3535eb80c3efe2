package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const dashboardFile = "../deploy/grafana/sagad-dashboard.json"

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var metricName = regexp.MustCompile(`\bsagad_[a-z_]+`)

// dashboardMetrics returns every metric name the dashboard's panels query,
// histogram series suffixes stripped, and the expressions that use them.
func dashboardMetrics(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" {
				require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q has an empty query", p.Title)
				for _, n := range metricName.FindAllString(tg.Expr, -1) {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						n = strings.TrimSuffix(n, suffix)
					}
					out[n] = append(out[n], tg.Expr)
				}
			}
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboardQueriesExistingMetrics: every metric the dashboard queries is
// in a registry built the way sagad builds it (recorder and collector).
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	touch(f.m)
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}

	used := dashboardMetrics(t)
	require.NotEmpty(t, used)
	for name, exprs := range used {
		require.True(t, have[name], "dashboard queries %s, which sagad does not expose (in %q)", name, exprs[0])
	}

	// And the other way round: every sagad metric is on the dashboard.
	for name := range have {
		if strings.HasPrefix(name, "sagad_") {
			require.Contains(t, used, name, "metric %s is not on the dashboard", name)
		}
	}
}

// TestDashboardIsPortable: it selects its data source through the
// DS_PROMETHEUS variable, never a hard-coded uid.
func TestDashboardIsPortable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	var uids []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ds, ok := v["datasource"].(map[string]any); ok {
				uids = append(uids, ds["uid"].(string))
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(raw["panels"])
	require.NotEmpty(t, uids)
	slices.Sort(uids)
	require.Equal(t, []string{"${DS_PROMETHEUS}"}, slices.Compact(uids))
}
