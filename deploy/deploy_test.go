// Package deploy_test checks the deploy kit offline: the alert rules and
// the dashboard's queries with promtool (Debian's prometheus package), the
// Prometheus configurations, the compose file's wiring of Prometheus and
// Grafana, and the Dockerfile. CI runs no Docker; what needs sagad's own
// flag set (the compose file's and the systemd unit's sagad arguments, the
// cluster configuration run in-process) is tested in cmd/internal/daemon.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/internal/testreq"
)

const (
	alertsFile     = "prometheus/alerts.yml"
	alertTestsFile = "prometheus/alerts_test.yml"
	dashboardFile  = "grafana/sagad-dashboard.json"
	composeFile    = "compose/compose.yaml"
	operateDoc     = "../docs/OPERATE.md"
)

// promtool finds promtool, or skips the test saying what to install (fails
// where every test must run: internal/testreq).
func promtool(t *testing.T) string {
	t.Helper()
	return testreq.Program(t, "apt-get install prometheus (it ships promtool)", "promtool")
}

// runPromtool runs promtool with args in dir and fails with its output
// unless it succeeds.
func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert,omitempty"`
	Record      string            `yaml:"record,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, v), file)
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	readYAML(t, alertsFile, &f)
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

func TestAlertRulesCheck(t *testing.T) {
	t.Parallel()
	out := runPromtool(t, ".", "check", "rules", alertsFile)
	require.Contains(t, out, "SUCCESS")
}

// TestAlertRulesUnit runs alerts_test.yml exactly as an operator would,
// from the repository root, against the real alerts.yml.
func TestAlertRulesUnit(t *testing.T) {
	t.Parallel()
	out := runPromtool(t, "..", "test", "rules", path.Join("deploy", alertTestsFile))
	require.Contains(t, out, "SUCCESS")
}

// headingAnchor is GitHub's anchor of a Markdown heading.
func headingAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbookBase is where every alert's runbook_url points: docs/OPERATE.md
// in the repository, at the alert's section.
const runbookBase = "https://github.com/sagad/sagad/blob/main/docs/OPERATE.md#"

// TestAlertRulesDocumented: every alert has a severity, a summary, a
// description and a runbook_url (the annotation Alertmanager and Grafana
// link) naming a section of docs/OPERATE.md that exists, and a unit test.
func TestAlertRulesDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(operateDoc)
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors[headingAnchor(h)] = true
		}
	}
	tests, err := os.ReadFile(alertTestsFile)
	require.NoError(t, err)
	link := regexp.MustCompile(`^` + regexp.QuoteMeta(runbookBase) + `([a-z0-9_-]+)$`)
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		require.NotEmpty(t, r.Alert, "only alerts in %s: %q", alertsFile, r.Expr)
		require.False(t, seen[r.Alert], "alert %s twice", r.Alert)
		seen[r.Alert] = true
		require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
		require.ElementsMatch(t, []string{"summary", "description", "runbook_url"}, keysOf(r.Annotations), "%s's annotations", r.Alert)
		for _, a := range []string{"summary", "description", "runbook_url"} {
			require.NotEmpty(t, strings.TrimSpace(r.Annotations[a]), "%s has no %s", r.Alert, a)
		}
		m := link.FindStringSubmatch(r.Annotations["runbook_url"])
		require.NotNil(t, m, "%s's runbook_url is no link to a docs/OPERATE.md section: %q", r.Alert, r.Annotations["runbook_url"])
		require.True(t, anchors[m[1]], "%s's runbook_url points to docs/OPERATE.md#%s, which has no such heading", r.Alert, m[1])
		require.Contains(t, string(tests), "alertname: "+r.Alert, "%s has no unit test in %s", r.Alert, alertTestsFile)
	}
}

// grafanaVariables stand in for the dashboard's variables, so that its
// queries become plain PromQL.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h",
	"${instance}", ".*", "$instance", ".*",
)

// dashboardQueries returns every query of the dashboard, variables
// substituted.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	type panel struct {
		Title   string            `json:"title"`
		Panels  []json.RawMessage `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var exprs []string
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			require.NoError(t, json.Unmarshal(raw, &p))
			walk(p.Panels)
			for _, tg := range p.Targets {
				e := grafanaVariables.Replace(tg.Expr)
				require.NotContains(t, e, "$", "panel %q: a variable the test does not know: %s", p.Title, tg.Expr)
				exprs = append(exprs, e)
			}
		}
	}
	walk(d.Panels)
	return exprs
}

// TestDashboardQueriesParse: promtool parses every dashboard query (each
// made a recording rule).
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	exprs := dashboardQueries(t)
	require.GreaterOrEqual(t, len(exprs), 37)
	var f ruleFile
	f.Groups = make([]struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	}, 1)
	f.Groups[0].Name = "dashboard"
	for i, e := range exprs {
		f.Groups[0].Rules = append(f.Groups[0].Rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i+1), Expr: e})
	}
	b, err := yaml.Marshal(f)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.yml"), b, 0o600))
	out := runPromtool(t, dir, "check", "rules", "dashboard.yml")
	require.Contains(t, out, fmt.Sprintf("SUCCESS: %d rules found", len(exprs)))
}

// TestPrometheusConfigLocal: the scrape example and its rules.
func TestPrometheusConfigLocal(t *testing.T) {
	t.Parallel()
	out := runPromtool(t, ".", "check", "config", "prometheus/prometheus.yml")
	require.Contains(t, out, "SUCCESS: 1 rule files found")
}

// compose is the part of compose.yaml the tests read.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Profiles    []string          `yaml:"profiles"`
		Build       *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
			Target     string `yaml:"target"`
		} `yaml:"build"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) compose {
	t.Helper()
	var c compose
	readYAML(t, composeFile, &c)
	require.NotEmpty(t, c.Services)
	return c
}

// defaultValue is the value compose gives ${NAME:-default} without a .env.
var defaultValue = regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`)

// mounts maps each container path of a service's bind mounts to the host
// path (relative to the compose file's directory, as compose reads it).
func mounts(t *testing.T, volumes []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		require.GreaterOrEqual(t, len(parts), 2, v)
		if !strings.HasPrefix(parts[0], ".") {
			continue // a named volume
		}
		m[parts[1]] = filepath.Join(filepath.Dir(composeFile), parts[0])
	}
	return m
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	for _, s := range []string{"nats-1", "nats-2", "nats-3", "sagad-1", "sagad-2", "worker-execute", "worker-review", "prometheus", "grafana", "sagactl"} {
		require.Contains(t, c.Services, s)
	}
	for name, s := range c.Services {
		// Images pinned: no latest, no bare name.
		if s.Build == nil {
			require.Regexp(t, `^[a-z0-9./_-]+:v?[0-9][0-9a-z.-]*$|^sagad:local$`, s.Image, name)
		} else {
			require.Equal(t, "Dockerfile", s.Build.Dockerfile, name)
			_, err := os.Stat(filepath.Join(filepath.Dir(composeFile), s.Build.Context, s.Build.Dockerfile))
			require.NoError(t, err, name)
		}
		// Published on the host's loopback only.
		for _, p := range s.Ports {
			require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s beyond loopback", name, p)
		}
		// Every bind mount's source exists.
		for target, src := range mounts(t, s.Volumes) {
			_, err := os.Stat(src)
			require.NoError(t, err, "%s mounts %s on %s", name, src, target)
		}
	}
	// Every service of an image built here says how to build it: `docker
	// compose run` of one without would find no image, or a stale one.
	for name, s := range c.Services {
		if strings.HasSuffix(s.Image, ":local") {
			require.NotNil(t, s.Build, "%s uses the local image %s and has no build:", name, s.Image)
		}
	}
	require.Equal(t, c.Services["sagad-1"].Build, c.Services["sagactl"].Build, "sagactl runs the sagad image, built the same way")
	// The NATS servers run the version the tests run embedded.
	ver := natsServerVersion(t)
	for _, name := range []string{"nats-1", "nats-2", "nats-3"} {
		require.Equal(t, "nats:"+ver+"-alpine", c.Services[name].Image, "%s runs the nats-server of go.mod", name)
	}
	// The workers are the Dockerfile's demo-worker target.
	require.Equal(t, "demo-worker", c.Services["worker-execute"].Build.Target)
	require.Equal(t, "demo-worker", c.Services["worker-review"].Build.Target)
	df, err := os.ReadFile("../Dockerfile")
	require.NoError(t, err)
	require.Contains(t, string(df), " AS demo-worker\n")
}

// TestComposePrometheus: the compose Prometheus's configuration, checked by
// promtool in a directory laid out as the container's /etc/prometheus, and
// scraping every sagad service on the port it listens on.
func TestComposePrometheus(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	dir := t.TempDir()
	for target, src := range mounts(t, c.Services["prometheus"].Volumes) {
		rel, ok := strings.CutPrefix(target, "/etc/prometheus/")
		require.True(t, ok, "prometheus mounts %s", target)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, rel), b, 0o600))
	}
	out := runPromtool(t, dir, "check", "config", "prometheus.yml")
	require.Contains(t, out, "SUCCESS: 1 rule files found")
	b, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	require.NoError(t, err)
	want, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	require.Equal(t, string(want), string(b), "the compose Prometheus loads deploy/prometheus/alerts.yml")

	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(dir, "prometheus.yml"), &cfg)
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		require.Equal(t, "sagad", sc.JobName, "the alert rules expect job=\"sagad\"")
		for _, s := range sc.StaticConfigs {
			targets = append(targets, s.Targets...)
		}
	}
	var want2 []string
	for name, s := range c.Services {
		if !strings.HasPrefix(name, "sagad-") {
			continue
		}
		listen := s.Environment["SAGAD_HTTP_LISTEN"]
		_, port, err := net.SplitHostPort(listen)
		require.NoError(t, err, "%s: SAGAD_HTTP_LISTEN %q", name, listen)
		want2 = append(want2, net.JoinHostPort(name, port))
	}
	slices.Sort(targets)
	slices.Sort(want2)
	require.Equal(t, want2, targets, "Prometheus scrapes every sagad of the compose file")
}

// TestComposeGrafana: Grafana's data source is the compose Prometheus and
// its dashboard provider reads the directory the real dashboard is mounted
// in.
func TestComposeGrafana(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	g := c.Services["grafana"]
	m := mounts(t, g.Volumes)

	// The dashboard file mounted is the repository's.
	var dashTarget string
	for target, src := range m {
		if filepath.Clean(src) == filepath.Clean(dashboardFile) {
			dashTarget = target
		}
	}
	require.NotEmpty(t, dashTarget, "grafana does not mount %s", dashboardFile)
	require.Equal(t, dashTarget, g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])

	// Provisioning directories, read from their host side.
	provisioning := func(kind string) string {
		src, ok := m["/etc/grafana/provisioning/"+kind]
		require.True(t, ok, "grafana mounts no %s provisioning", kind)
		return src
	}
	var providers struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(provisioning("dashboards"), "sagad.yml"), &providers)
	require.Equal(t, 1, providers.APIVersion)
	require.Len(t, providers.Providers, 1)
	require.Equal(t, "file", providers.Providers[0].Type)
	require.Equal(t, path.Dir(dashTarget), providers.Providers[0].Options.Path, "the provider reads where the dashboard is mounted")

	var sources struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Type      string `yaml:"type"`
			URL       string `yaml:"url"`
			IsDefault bool   `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(provisioning("datasources"), "prometheus.yml"), &sources)
	require.Equal(t, 1, sources.APIVersion)
	require.Len(t, sources.Datasources, 1)
	ds := sources.Datasources[0]
	require.Equal(t, "prometheus", ds.Type)
	require.True(t, ds.IsDefault, "the dashboard's DS_PROMETHEUS variable picks the default data source")
	u, err := url.Parse(ds.URL)
	require.NoError(t, err)
	require.Contains(t, c.Services, u.Hostname(), "the data source names a compose service")
	require.Equal(t, "9090", u.Port())

	// The dashboard is the real one, with the data source variable.
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	require.True(t, bytes.Contains(b, []byte(`"name": "DS_PROMETHEUS"`)))
}

// TestDockerfile: a static build, a distroless non-root final stage, and a
// health check that is sagad's own probe.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	require.NoError(t, err)
	df := string(b)
	require.Contains(t, df, "ENV CGO_ENABLED=0")
	require.Contains(t, df, `pkgs="./cmd/sagad ./cmd/sagactl ./examples/worker"`)
	stages := strings.Split(df, "\nFROM ")
	final := stages[len(stages)-1]
	require.True(t, strings.HasPrefix(final, "gcr.io/distroless/static"), "the default target is the last stage: %s", final[:40])
	require.Contains(t, final, "USER 65532:65532")
	require.Contains(t, final, `ENTRYPOINT ["/usr/local/bin/sagad"]`)
	require.Contains(t, final, `CMD ["/usr/local/bin/sagad", "healthcheck"]`)
	require.Contains(t, final, `VOLUME ["/data"]`)
	require.Contains(t, final, "EXPOSE 4222 9464")
	require.Contains(t, final, "SAGAD_DATA_DIR=/data")
	require.Contains(t, final, "STOPSIGNAL SIGTERM")

	ignore, err := os.ReadFile("../.dockerignore")
	require.NoError(t, err)
	require.Contains(t, string(ignore), "node_modules")
	require.NotContains(t, string(ignore), ".git\n", "the VCS stamp needs .git")
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// natsServerVersion is the nats-server version of go.mod, without its v:
// the server every test runs embedded.
func natsServerVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 v(\d+\.\d+\.\d+)\s*$`).FindSubmatch(b)
	require.NotNil(t, m, "go.mod requires no nats-server")
	return string(m[1])
}
