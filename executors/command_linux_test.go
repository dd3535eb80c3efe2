//go:build linux

package executors_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
)

// gone reports whether pid no longer runs: no such process, or a zombie its
// new parent (init, in a container perhaps one that never reaps) has yet to
// collect.
func gone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

// waitPID polls for the pid a script writes into file.
func waitPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	natstest.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		b, err := os.ReadFile(file)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, "no pid in %s", file)
	return pid
}

// TestCommandCancelKillsGrandchild: cancelling the context kills the
// program's whole process group, so a grandchild it left running in the
// background dies with it.
func TestCommandCancelKillsGrandchild(t *testing.T) {
	dir := t.TempDir()
	cmd := shellScript(t, dir, `sleep 60 &
echo $! > "$OUT/grandchild.tmp" && mv "$OUT/grandchild.tmp" "$OUT/grandchild"
wait`)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	errc := make(chan error, 1)
	go func() {
		_, err := cmd.Execute(ctx, execRequest(t))
		errc <- err
	}()
	pid := waitPID(t, filepath.Join(dir, "grandchild"))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.False(t, gone(pid), "the grandchild runs before the cancel")
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return after the cancel")
	}
	natstest.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return gone(pid) },
		"grandchild %d outlived the cancelled run", pid)
}

// fakeSagadEnv makes this test binary, re-executed, act as sagad running one
// command through the adapter (TestFakeSagad); its value is the directory
// the command writes its pid into.
const fakeSagadEnv = "SAGAD_TEST_FAKE_SAGAD_DIR"

// TestFakeSagad is not a test of its own: it is the "sagad" process of
// TestCommandDiesWithSagad, and skips unless re-executed by it.
func TestFakeSagad(t *testing.T) {
	dir := os.Getenv(fakeSagadEnv)
	if dir == "" {
		t.Skip("helper process of TestCommandDiesWithSagad")
	}
	// exec: the sleep is the adapter's direct child, the process the kernel's
	// parent-death signal is for.
	cmd := executors.Command{Path: "/bin/sh", Args: []string{"-c", `echo $$ > "$OUT/child.tmp" && mv "$OUT/child.tmp" "$OUT/child" && exec sleep 60`},
		Env: []string{"OUT=" + dir}, Timeout: time.Minute}
	_, err := cmd.Execute(context.Background(), execRequest(t))
	t.Fatalf("the command returned (%v) before this process was killed", err)
}

// TestCommandDiesWithSagad: a program the adapter started dies when the
// process that started it is killed with SIGKILL, when no cancellation and
// no deferred cleanup can run.
func TestCommandDiesWithSagad(t *testing.T) {
	dir := t.TempDir()
	sagad := exec.Command(os.Args[0], "-test.run=^TestFakeSagad$", "-test.count=1")
	sagad.Env = append(os.Environ(), fakeSagadEnv+"="+dir)
	sagad.Stdout, sagad.Stderr = os.Stderr, os.Stderr
	require.NoError(t, sagad.Start())
	t.Cleanup(func() { _ = sagad.Process.Kill(); _ = sagad.Wait() })

	pid := waitPID(t, filepath.Join(dir, "child"))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.False(t, gone(pid), "the command runs while sagad lives")

	require.NoError(t, sagad.Process.Signal(syscall.SIGKILL))
	_ = sagad.Wait()
	natstest.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return gone(pid) },
		"command %d outlived sagad, killed with SIGKILL", pid)
}
