package testreq_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/testreq"
)

func TestRequireAll(t *testing.T) {
	for _, tt := range []struct {
		all, ci string
		want    bool
	}{
		{"", "", false},
		{"1", "", true},
		{"", "true", true},
		{"0", "false", false},
		{"no", "", false},
	} {
		t.Setenv(testreq.RequireAllEnv, tt.all)
		t.Setenv("CI", tt.ci)
		require.Equal(t, tt.want, testreq.RequireAll(), "%+v", tt)
	}
}

// recorder is a testing.TB that records a skip or a failure and stops
// its goroutine, as the real ones do.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestProgramMissing: with PATH holding nothing, a missing program skips
// the test, or fails it when the environment asks for everything; a
// program found is returned.
func TestProgramMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "")
	for _, all := range []string{"", "1"} {
		t.Setenv(testreq.RequireAllEnv, all)
		rec := &recorder{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			testreq.Program(rec, "apt-get install nothing", "no-such-program")
		}()
		<-done
		require.Equal(t, all == "", rec.skipped, "require all %q", all)
		require.Equal(t, all == "1", rec.failed, "require all %q", all)
		require.Contains(t, rec.msg, "no-such-program not found: apt-get install nothing")
	}
}

func TestProgramFound(t *testing.T) {
	t.Setenv("PATH", "/bin:/usr/bin")
	require.NotEmpty(t, testreq.Program(t, "", "no-such-program", "sh"))
}
