package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	systemdUnit = filepath.Join("..", "..", "..", "deploy", "systemd", "sagad.service")
	systemdEnv  = filepath.Join("..", "..", "..", "deploy", "systemd", "sagad.env")
)

// unitDirectives reads a systemd unit's [Service] section: every value of
// each key, in order.
func unitDirectives(t *testing.T, file, section string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	out := map[string][]string{}
	in := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			in = strings.Trim(line, "[]")
		case in == section:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s: %q", file, line)
			out[k] = append(out[k], v)
		}
	}
	return out
}

// TestSystemdUnit: the unit runs sagad with flags sagad has, gives its
// graceful shutdown the time it takes, restarts on failure but not on a bad
// configuration, and is hardened.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	svc := unitDirectives(t, systemdUnit, "Service")
	require.Len(t, svc["ExecStart"], 1)
	exec := strings.Fields(svc["ExecStart"][0])
	require.Equal(t, "/usr/local/bin/sagad", exec[0])
	// %S is systemd's state directory root (/var/lib).
	var args []string
	for _, a := range exec[1:] {
		args = append(args, strings.ReplaceAll(a, "%S", "/var/lib"))
	}
	cfg, err := parseConfig(args, envOf(nil), os.Stderr)
	require.NoError(t, err, "ExecStart: %v", args)
	require.Equal(t, "/var/lib/sagad/data", cfg.DataDir)
	require.Equal(t, []string{"sagad"}, svc["StateDirectory"])
	require.Equal(t, []string{"%S/sagad"}, svc["WorkingDirectory"])

	// Graceful shutdown: --shutdown-timeout, then a flush of up to 5s.
	stop, err := time.ParseDuration(svc["TimeoutStopSec"][0])
	require.NoError(t, err)
	require.Greater(t, stop, time.Duration(cfg.ShutdownTimeout)+5*time.Second)
	require.Equal(t, []string{"SIGTERM"}, svc["KillSignal"])
	require.Equal(t, []string{"mixed"}, svc["KillMode"])

	require.Equal(t, []string{"on-failure"}, svc["Restart"])
	require.Equal(t, []string{"2"}, svc["RestartPreventExitStatus"], "exit 2 is a bad flag or config (Main)")
	require.Equal(t, []string{"-/etc/sagad/sagad.env"}, svc["EnvironmentFile"])

	for k, v := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictSUIDSGID": "yes", "CapabilityBoundingSet": "",
		"SystemCallFilter": "@system-service", "UMask": "0077",
	} {
		require.Equal(t, []string{v}, svc[k], k)
	}
	require.NotContains(t, svc, "MemoryDenyWriteExecute", "command executors inherit it; JITs cannot run under it")
}

// TestSystemdEnvFile: every variable the example environment file sets or
// suggests is one sagad reads, and the stop timeout it mentions holds.
func TestSystemdEnvFile(t *testing.T) {
	t.Parallel()
	var usage bytes.Buffer
	_, _ = parseConfig([]string{"-h"}, envOf(nil), &usage)
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(SAGAD?_[A-Z_]+)\b`).FindAllStringSubmatch(usage.String(), -1) {
		known[m[1]] = true
	}
	require.True(t, known["SAGAD_NATS_PASSWORD"])
	b, err := os.ReadFile(systemdEnv)
	require.NoError(t, err)
	env := map[string]string{}
	set := regexp.MustCompile(`^#?(SAGAD?_[A-Z_]+)=(.*)$`)
	for _, line := range strings.Split(string(b), "\n") {
		m := set.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		require.True(t, known[m[1]], "sagad.env names %s, which sagad does not read", m[1])
		env[m[1]] = m[2]
	}
	require.NotEmpty(t, env)
	// Uncommented all at once, the file is a valid configuration (but for
	// the config file it names, which is the operator's).
	delete(env, "SAGAD_CONFIG")
	env["SAGAD_NATS_PASSWORD_FILE"] = secretFile(t, "pw")
	// The embedded server and an outside NATS are the file's two
	// alternatives: together sagad refuses them.
	_, err = parseConfig(nil, envOf(env), os.Stderr)
	require.ErrorIs(t, err, ErrNATSChoice)
	delete(env, "SAGAD_NATS_LISTEN")
	cfg, err := parseConfig(nil, envOf(env), os.Stderr)
	require.NoError(t, err)
	require.Empty(t, cfg.warnings)
	require.Equal(t, 3, cfg.Replicas)
	svc := unitDirectives(t, systemdUnit, "Service")
	stop, err := time.ParseDuration(svc["TimeoutStopSec"][0])
	require.NoError(t, err)
	require.Greater(t, stop, time.Duration(cfg.ShutdownTimeout)+5*time.Second)
}

// TestSystemdUnitAnalyze: where systemd-analyze is installed, it knows
// every directive of the unit and rates its exposure low.
func TestSystemdUnitAnalyze(t *testing.T) {
	t.Parallel()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (the other systemd tests do not need it)")
	}
	out, err := exec.Command(sa, "--offline=yes", "security", systemdUnit).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("Overall exposure level")) {
		t.Skipf("systemd-analyze --offline security does not run here: %v: %s", err, out)
	}
	require.NotContains(t, string(out), "Unknown key", string(out))
	require.NotContains(t, string(out), "Unknown section", string(out))
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	require.NotNil(t, m, string(out))
	level, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	require.LessOrEqual(t, level, 2.0, "exposure %s", m[1])
}
