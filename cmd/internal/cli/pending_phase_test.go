package cli_test

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// TestOnlinePausedPhaseInPending: a phase paused with --by and --reason
// leads `pending` with who, since when, why and how many messages wait in
// it, and `phase list` says the same; once resumed, pending no longer
// names it.
func TestOnlinePausedPhaseInPending(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	r := o.run(t, "phase", "pause", "EXECUTION", "--by", "alice", "--reason", "disk swap")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	doc := o.own(t, capsuletest.New())
	r = o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var phases []admin.PhaseState
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		r = o.run(t, "phase", "list", "-o", "json")
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &phases) == nil && phases[capsule.Execution].Pending == 1
	}, "the capsule's step never queued in EXECUTION: %s", r.out)
	ex := phases[capsule.Execution]
	require.True(t, ex.Paused)
	require.Equal(t, "alice", ex.PausedBy)
	require.Equal(t, "disk swap", ex.PauseReason)
	require.NotNil(t, ex.PausedAt)
	require.WithinDuration(t, time.Now(), *ex.PausedAt, time.Minute)

	r = o.run(t, "pending")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, regexp.MustCompile(`(?m)^PAUSED_PHASE\s+PAUSED_BY\s+SINCE\s+AGE\s+WAITING\s+IN_FLIGHT\s+REASON$`), r.out)
	require.Regexp(t, regexp.MustCompile(`(?m)^4 EXECUTION\s+alice\s+\d{4}-\d\d-\d\dT\S+Z\s+\S+\s+1\s+0\s+disk swap \(sagactl phase resume EXECUTION\)$`), r.out)
	require.Regexp(t, regexp.MustCompile(`(?m)^CAPSULE_ID\s+STATE`), r.out, "the capsules' table follows")

	r = o.run(t, "phase", "list")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, regexp.MustCompile(`(?m)^4 EXECUTION\s+phase-4\s+true\s+1\s+0\s+alice\s+\S+Z\s+disk swap$`), r.out)

	r = o.run(t, "phase", "resume", "EXECUTION")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "pending")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.NotContains(t, r.out, "PAUSED_PHASE")
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitOK, r.code, "the capsule goes on once the phase resumes: %s", r.errOut)
}
