package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
)

// operatorPanels are the dashboard panels only operator actions feed: they
// stayed empty while sagactl wrote KV itself instead of asking sagad.
var operatorPanels = []string{"Cancelled (1h)", "Pauses and resumes", "Admin actions and scrape errors"}

// TestAdminActionsReachMetrics runs every admin command through sagactl
// against a running sagad and checks that sagad's /metrics counted them,
// including every series of the dashboard panels only operators feed.
func TestAdminActionsReachMetrics(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HTTPListen = freeAddr(t)
	d := start(t, cfg)
	ctl := func(args ...string) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		// As the operator role sagad wrote the seed of.
		code := cli.Main(append([]string{"--nats-url", d.url, "--nats-nkey", filepath.Join(CredsDir(cfg.DataDir), RoleOperator+natsconn.SeedExt)}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	publish := func(doc capsuletest.Doc) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "capsule.json")
		require.NoError(t, os.WriteFile(p, doc.Sealed(t), 0o600))
		code, out := ctl("publish", p)
		require.Equal(t, cli.ExitOK, code, out)
	}
	status := func(id string) client.Status {
		t.Helper()
		code, out := ctl("status", id, "-o", "json")
		require.Equal(t, cli.ExitOK, code, out)
		var s client.Status
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		return s
	}
	ok := func(args ...string) {
		t.Helper()
		code, out := ctl(args...)
		require.Equal(t, cli.ExitOK, code, "%v: %s", args, out)
	}

	// The operator gate: revise, then accept.
	gated := capsuletest.New().Set("review.operator_gate", true)
	publish(gated)
	code, out := ctl("wait", gated.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitHuman, code, out)
	ok("pending")
	ok("decide", gated.ID(), "revise", "--rationale", "shorter", "--by", "carol")
	code, out = ctl("wait", gated.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitHuman, code, out)
	ok("decide", gated.ID(), "accept", "--by", "carol")
	code, out = ctl("wait", gated.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitOK, code, out)

	// Hold a capsule at EXECUTION: pause, resume and cancel it there.
	ok("phase", "pause", "EXECUTION")
	held := capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"})
	publish(held)
	// Its step waits at EXECUTION (the checkpoint shows PLANNING until
	// EXECUTION's claim writes the deferred advances).
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		code, out := ctl("phase", "list", "-o", "json")
		var phases []admin.PhaseState
		return code == cli.ExitOK && json.Unmarshal([]byte(out), &phases) == nil && phases[capsule.Execution].Pending == 1
	}, "capsule never reached EXECUTION")
	ok("pause", held.ID(), "--reason", "look first")
	ok("resume", held.ID(), "--tokens", "20000")
	ok("cancel", held.ID(), "--reason", "not needed")
	ok("phase", "resume", "4")
	require.Equal(t, capsule.Cancelled, status(held.ID()).State)

	body := scrape(t, "http://"+cfg.HTTPListen+"/metrics")
	for series, want := range map[string]float64{
		`sagad_capsules_cancelled_total`:                   1,
		`sagad_admin_actions_total{action="pause"}`:        1,
		`sagad_admin_actions_total{action="resume"}`:       1,
		`sagad_admin_actions_total{action="cancel"}`:       1,
		`sagad_admin_actions_total{action="accept"}`:       1,
		`sagad_admin_actions_total{action="revise"}`:       1,
		`sagad_admin_actions_total{action="phase_pause"}`:  1,
		`sagad_admin_actions_total{action="phase_resume"}`: 1,
		`sagad_resumes_total{trigger="operator_manual"}`:   1,
		`sagad_resumes_total{trigger="operator_gate"}`:     2, // the revise and the accept
		`sagad_pauses_total{trigger="operator_manual"}`:    1,
		`sagad_pauses_total{trigger="operator_gate"}`:      2,
	} {
		require.Equal(t, want, value(t, body, series), series)
	}

	// Every metric of the operator-fed panels has moved.
	for _, m := range panelMetrics(t, operatorPanels) {
		if m == "sagad_jetstream_scrape_errors_total" {
			continue // shares the panel; counts scrape failures, not actions
		}
		require.Positive(t, sum(t, body, m), "%s is still 0 after every admin action", m)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	resp, err := hc.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return string(b)
}

// value returns the sample of one series (name{labels}) in a scrape.
func value(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	t.Fatalf("no series %s in the scrape", series)
	return 0
}

// sum adds every sample of metric name in a scrape.
func sum(t *testing.T, body, name string) float64 {
	t.Helper()
	var total float64
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		total += f
	}
	return total
}

var metricName = regexp.MustCompile(`sagad_[a-z_]+`)

// panelMetrics returns the sagad_ metrics the named panels of the Grafana
// dashboard query.
func panelMetrics(t *testing.T, titles []string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "grafana", "sagad-dashboard.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	seen := map[string]bool{}
	var out []string
	found := 0
	for _, p := range dash.Panels {
		if !contains(titles, p.Title) {
			continue
		}
		found++
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if !seen[m] {
					seen[m] = true
					out = append(out, m)
				}
			}
		}
	}
	require.Equal(t, len(titles), found, "panels %v in the dashboard", titles)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
