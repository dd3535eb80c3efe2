// Package testreq decides what a test does when a program it needs beyond Go
// (Chromium, promtool, Node.js) is not installed: on a developer's machine
// with Go alone it skips, saying what to install; where the environment asks
// for every test to run (CI, .ci/run) it fails, because a check skipped
// there would pass without checking anything.
package testreq

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// RequireAllEnv is the environment variable that makes a missing program
// fail its test instead of skipping it; .ci/run sets it to 1. CI=true (set
// by most CI services) does the same.
const RequireAllEnv = "SAGA_TEST_REQUIRE_ALL"

// RequireAll reports whether the environment asks for every test to run:
// $SAGA_TEST_REQUIRE_ALL or $CI is set to a true value (1, true, …).
func RequireAll() bool {
	for _, v := range []string{RequireAllEnv, "CI"} {
		if b, err := strconv.ParseBool(os.Getenv(v)); err == nil && b {
			return true
		}
	}
	return false
}

// Missing skips t (or fails it, when [RequireAll]) because what is missing
// — "promtool", "node" — is not installed; install says how to get it
// ("apt-get install prometheus").
func Missing(t testing.TB, what, install string) {
	t.Helper()
	msg := what + " not found: " + install + " to run this test"
	if RequireAll() {
		t.Fatalf("%s (%s or CI is set: every test must run)", msg, RequireAllEnv)
	}
	t.Skip(msg)
}

// Program returns the path of the first of names found on PATH, or calls
// [Missing] with the first name and install.
func Program(t testing.TB, install string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Missing(t, names[0], install)
	return ""
}
