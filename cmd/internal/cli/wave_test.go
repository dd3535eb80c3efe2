package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// TestOnlineWave drives `sagactl wave` as an operator would: a wave is set,
// a capsule too big for it waits (list --state waiting, status waiting_on
// wave_too_small, wave show), goes on when the cap is raised; another waits
// and halts wave_closed:<wave> when the wave is closed, after which its caps
// cannot change (exit 5).
func TestOnlineWave(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)

	r := o.run(t, "wave", "list", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.JSONEq(t, "[]", r.out)

	r = o.run(t, "wave", "set", "w1", "--tokens", "3000", "--by", "ann", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var w admin.WaveInfo
	require.NoError(t, json.Unmarshal([]byte(r.out), &w))
	require.Equal(t, int64(3000), w.TokensCap)
	require.Zero(t, w.DollarsCap)

	// Issue 35: the shell completes the waves sagad knows.
	r = o.run(t, "__complete", "wave", "show", "w")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Equal(t, "w1\n:4\n", firstLines(r.out))
	r = o.run(t, "__complete", "wave", "show", "x")
	require.Equal(t, ":4\n", firstLines(r.out))

	for _, args := range [][]string{
		{"wave", "set", "w1", "--tokens", "-1"},
		{"wave", "set", "w1", "--dollars", "-2"},
		{"wave", "set", "bad.id"},
		{"wave", "show"},
		{"wave", "close", "a b"},
	} {
		r = o.run(t, args...)
		require.Equal(t, cli.ExitUsage, r.code, "%v: %s", args, r.errOut)
	}
	r = o.run(t, "wave", "show", "nope")
	require.Equal(t, cli.ExitNotFound, r.code, r.errOut)

	big := o.own(t, capsuletest.New().Set("wave_id", "w1").Set("budget.tokens", 4000))
	r = o.run(t, "publish", file(t, big.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	o.waitState(t, big.ID(), capsule.Waiting)
	r = o.run(t, "list", "--state", "waiting", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var listed []client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, big.ID(), listed[0].CapsuleID)
	require.Equal(t, "wave_too_small", listed[0].WaitingOn, "bigger than the whole cap: a person's to raise")
	r = o.run(t, "status", big.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, `waiting_on: +wave_too_small w1\n`, r.out)

	// The continuation that lists a waiting capsule is written right after
	// its checkpoint.
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		r = o.run(t, "wave", "show", "w1")
		return r.code == cli.ExitOK && strings.Contains(r.out, big.ID())
	}, "wave show lists the waiting capsule")
	require.Contains(t, r.out, "tokens:   cap 3000, used 0, reserved 0, left 3000")
	require.Contains(t, r.out, "waiting:  "+big.ID())
	r = o.run(t, "wave", "show", "w1", "-o", "yaml")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var y map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(r.out), &y))
	require.Equal(t, []any{big.ID()}, y["waiting"])

	r = o.run(t, "wave", "set", "w1", "--tokens", "5000", "--dollars", "20")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", big.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitOK, r.code, "the raised cap lets it in: %s", r.errOut)

	huge := o.own(t, capsuletest.New().Set("wave_id", "w1").Set("budget.tokens", 9000))
	r = o.run(t, "publish", file(t, huge.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	o.waitState(t, huge.ID(), capsule.Waiting)
	r = o.run(t, "wave", "close", "w1", "--reason", "sprint over")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "state:    closed")
	r = o.run(t, "wait", huge.ID(), "--timeout", "20s", "-o", "json")
	require.Equal(t, cli.ExitFailure, r.code, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	require.Equal(t, "wave_closed:w1", s.HaltReason)
	r = o.run(t, "report", huge.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "waiting_for_wave_capacity", "the report shows the wait")
	require.Contains(t, r.out, "wave_closed:w1")

	r = o.run(t, "wave", "set", "w1", "--tokens", "1")
	require.Equal(t, cli.ExitRefused, r.code, r.errOut)
	require.Contains(t, r.errOut, "closed")

	r = o.run(t, "wave", "list")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "WAVE")
	require.Contains(t, r.out, "w1")
	require.Contains(t, r.out, "closed")
}

// TestOnlineWaveNoSagad: without a sagad, every wave command exits 6.
func TestOnlineWaveNoSagad(t *testing.T) {
	t.Parallel()
	o := startOnline(t, false)
	for _, tt := range []struct {
		args    []string
		subject string
	}{
		{[]string{"wave", "set", "w", "--tokens", "5"}, "saga.admin.wave.set"},
		{[]string{"wave", "show", "w"}, "saga.admin.wave.show"},
		{[]string{"wave", "list", "-o", "json"}, "saga.admin.wave.list"},
		{[]string{"wave", "close", "w"}, "saga.admin.wave.close"},
	} {
		r := o.run(t, tt.args...)
		require.Equal(t, cli.ExitNoSagad, r.code, "%v: %s", tt.args, r.errOut)
		require.Equal(t, "sagactl: no sagad answered on "+tt.subject+": is sagad running?\n", r.errOut)
	}
}

// waitState polls `sagactl status` until the capsule is in state want.
func (o *online) waitState(t *testing.T, id string, want capsule.State) {
	t.Helper()
	var last string
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		r := run(t, "--nats-url", o.url, "status", id, "-o", "json")
		var s client.Status
		if r.code != cli.ExitOK || json.Unmarshal([]byte(r.out), &s) != nil {
			return false
		}
		last = string(s.State)
		return s.State == want
	}, "capsule %s never %s (last %s)", id, want, &last)
}
