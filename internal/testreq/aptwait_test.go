package testreq_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeAptGet is an apt-get that fails as a held lock makes the real one
// fail for as many calls as the file locked says, then succeeds; "broken"
// fails otherwise.
const fakeAptGet = `#!/usr/bin/env bash
echo "$*" >> "$FAKE_DIR/calls"
if [ -e "$FAKE_DIR/broken" ]; then echo "E: Unable to locate package nosuch" >&2; exit 100; fi
n=$(cat "$FAKE_DIR/locked" 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then
  echo $((n - 1)) > "$FAKE_DIR/locked"
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
echo "installed"
`

// TestCIAptWaitsForTheLock runs .ci/apt.sh's apt_get against a fake
// apt-get: it waits while the lock is held and then installs; it gives up,
// with apt-get's message and exit code, once CI_APT_WAIT has passed; any
// other failure fails at once.
func TestCIAptWaitsForTheLock(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, err := filepath.Abs("../../.ci/apt.sh")
	require.NoError(t, err)
	for _, tc := range []struct {
		name      string
		locked    string
		broken    bool
		wait      string
		wantRC    int
		wantCalls int
		wantErr   string
	}{
		{name: "free", locked: "0", wait: "5", wantCalls: 1},
		{name: "held twice, then free", locked: "2", wait: "30", wantCalls: 3, wantErr: "another package manager holds the lock; trying again"},
		{name: "held past the wait", locked: "1000", wait: "1", wantRC: 100, wantErr: "lock was still held after 1s"},
		{name: "another failure", locked: "0", broken: true, wait: "30", wantRC: 100, wantCalls: 1, wantErr: "Unable to locate package"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			require.NoError(t, os.Mkdir(bin, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(bin, "apt-get"), []byte(fakeAptGet), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "locked"), []byte(tc.locked), 0o644))
			if tc.broken {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "broken"), nil, 0o644))
			}
			cmd := exec.Command(bash, "-c", `. "$1" && apt_get install -y chromium`, "bash", script)
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
				"FAKE_DIR="+dir, "CI_APT_WAIT="+tc.wait, "CI_APT_POLL=0.05", "APT_SUDO=")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			rc := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				rc = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantRC, rc, "stderr: %s", stderr.String())
			if tc.wantRC == 0 {
				require.Equal(t, "installed\n", string(out))
			}
			require.Contains(t, stderr.String(), tc.wantErr)
			calls, err := os.ReadFile(filepath.Join(dir, "calls"))
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
			if tc.wantCalls > 0 {
				require.Len(t, lines, tc.wantCalls)
			}
			require.Contains(t, lines[0], "-o DPkg::Lock::Timeout="+tc.wait+" install -y chromium", "apt-get waits for the dpkg lock itself too")
		})
	}
}
