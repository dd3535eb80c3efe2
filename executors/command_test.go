package executors_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
)

// The command tests do not run in parallel: a script written and executed
// while another test forks can fail with ETXTBSY (golang/go#22315).

// shellScript writes an executable #!/bin/sh script into dir and returns a
// Command running it with OUT=dir in its environment.
func shellScript(t *testing.T, dir, body string) executors.Command {
	t.Helper()
	path := filepath.Join(dir, "agent.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return executors.Command{Path: path, Name: "agent", Env: []string{"OUT=" + dir}, Timeout: 30 * time.Second}
}

func TestCommandExecuteOK(t *testing.T) {
	dir := t.TempDir()
	cmd := shellScript(t, dir, `cat > "$OUT/stdin"
echo '{"content":{"ok":true},"media_type":"application/json","usage":{"tokens":5,"dollars":0.1}}'`)
	req := execRequest(t)
	res, err := cmd.Execute(context.Background(), req)
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":true}`, string(res.Content))
	require.Equal(t, capsule.Usage{Tokens: 5, Dollars: 0.1}, res.Usage)

	// stdin is the wire request, intact.
	in, err := os.ReadFile(filepath.Join(dir, "stdin"))
	require.NoError(t, err)
	want, err := executors.NewExecuteCall(req)
	require.NoError(t, err)
	wantJSON, err := json.Marshal(want)
	require.NoError(t, err)
	require.Equal(t, string(wantJSON), string(in))
	var call executors.ExecuteCall
	require.NoError(t, json.Unmarshal(in, &call))
	require.JSONEq(t, string(req.Raw), string(call.Capsule))
}

func TestCommandEnvironment(t *testing.T) {
	t.Setenv("SAGAD_TEST_SECRET", "must-not-leak")
	dir := t.TempDir()
	cmd := shellScript(t, dir, `env > "$OUT/env"
echo '{"content":1}'`)
	cmd.Env = append(cmd.Env, "EXTRA=yes", "SAGA_OPERATOR_ANSWER=posing")
	req := execRequest(t)
	req.OperatorAnswer = &capsule.OperatorAnswer{Text: "licence is MIT", By: "dana", At: time.Now()}
	_, err := cmd.Execute(context.Background(), req)
	require.NoError(t, err)

	b, err := os.ReadFile(filepath.Join(dir, "env"))
	require.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	require.Equal(t, req.Capsule.CapsuleID, env["SAGA_CAPSULE_ID"])
	require.Equal(t, "2", env["SAGA_CYCLE"])
	require.Equal(t, req.IdempotencyKey, env["SAGA_IDEMPOTENCY_KEY"])
	require.Equal(t, "trace-123", env["SAGA_TRACE_ID"])
	require.Equal(t, "execute", env["SAGA_CALL"])
	require.Equal(t, req.CompletionToken, env["SAGA_COMPLETION_TOKEN"])
	require.Equal(t, "licence is MIT", env["SAGA_OPERATOR_ANSWER"], "the person's answer, never Env's")
	require.Equal(t, req.CallToken, env["SAGA_CALL_TOKEN"])
	require.Equal(t, "yes", env["EXTRA"])
	require.Equal(t, os.Getenv("PATH"), env["PATH"])
	require.NotContains(t, env, "SAGAD_TEST_SECRET")
	// Nothing else of the parent's: only what the shell itself adds.
	allowed := map[string]bool{"PATH": true, "HOME": true, "OUT": true, "EXTRA": true, "PWD": true, "SHLVL": true, "_": true, "OLDPWD": true, "TRACEPARENT": true}
	for k := range env {
		require.True(t, allowed[k] || strings.HasPrefix(k, "SAGA_"), "unexpected variable %s in the command's environment", k)
	}
}

func TestCommandShellMetacharactersAreInert(t *testing.T) {
	dir := t.TempDir()
	hostile := "$(touch pwned1); touch pwned2 `touch pwned3` | touch pwned4 && touch pwned5 > pwned6 '\""
	cmd := shellScript(t, dir, `cd "$OUT"
cat > stdin
printf '%s' "$SAGA_CAPSULE_ID" > id
echo '{"content":{}}'`)
	cmd.Dir = dir
	req := execRequest(t)
	req.Capsule.Task.Description = hostile
	req.Raw = nil // encode the modified capsule
	req.Capsule.CapsuleID = "id;" + hostile
	_, err := cmd.Execute(context.Background(), req)
	require.NoError(t, err)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), "pwned"), "capsule content was interpreted: %s exists", e.Name())
	}
	id, err := os.ReadFile(filepath.Join(dir, "id"))
	require.NoError(t, err)
	require.Equal(t, "id;"+hostile, string(id))
	var call executors.ExecuteCall
	in, err := os.ReadFile(filepath.Join(dir, "stdin"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(in, &call))
	var c capsule.Capsule
	require.NoError(t, json.Unmarshal(call.Capsule, &c))
	require.Equal(t, hostile, c.Task.Description)
}

func TestCommandExitCodes(t *testing.T) {
	tests := []struct {
		name string
		body string
		// review runs the command as a reviewer, else as an executor.
		review bool
		check  func(t *testing.T, res executors.ReviewResult, usage capsule.Usage, err error)
	}{
		{
			name: "1 failure with the stderr tail",
			body: "echo 'line one' >&2\necho 'model refused' >&2\nexit 1",
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				requireFailed(t, err, `command "agent": failed (exit status 1): line one; model refused`)
			},
		},
		{
			name: "1 failure keeps the usage and error of a reply on stdout",
			body: `echo '{"status":"failed","error":"quota","usage":{"tokens":9}}'` + "\nexit 1",
			check: func(t *testing.T, _ executors.ReviewResult, usage capsule.Usage, err error) {
				f := requireFailed(t, err, `command "agent": failed (exit status 1): quota`)
				require.Equal(t, int64(9), f.Usage.Tokens)
				require.Equal(t, int64(9), usage.Tokens)
			},
		},
		{
			name: "0 with a failed reply",
			body: `echo '{"status":"failed","error":"no data"}'`,
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				requireFailed(t, err, `command "agent": no data`)
			},
		},
		{
			name: "0 with garbage on stdout",
			body: `echo 'not json'`,
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				f := requireFailed(t, err, "")
				require.Contains(t, f.Detail, `command "agent": stdout: malformed reply`)
			},
		},
		{
			name: "3 human input",
			body: "echo 'which licence?' >&2\nexit 3",
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				require.ErrorIs(t, err, executors.ErrHumanInput)
				var h *executors.HumanInputError
				require.ErrorAs(t, err, &h)
				require.Equal(t, "which licence?", h.Detail)
			},
		},
		{
			name: "10 needs refinement fails an executor",
			body: "exit 10",
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				requireFailed(t, err, `command "agent": needs refinement (exit status 10)`)
			},
		},
		{
			name:   "10 needs refinement is CHANGES_REQUESTED for a reviewer, findings from stdout",
			review: true,
			body:   `echo '{"verdict":"APPROVED","findings":[{"field":"content","message":"cite sources"}],"usage":{"tokens":4}}'` + "\nexit 10",
			check: func(t *testing.T, res executors.ReviewResult, _ capsule.Usage, err error) {
				require.NoError(t, err)
				require.Equal(t, capsule.ChangesRequested, res.Verdict)
				require.Equal(t, []capsule.Finding{{Field: "content", Message: "cite sources"}}, res.Findings)
				require.Equal(t, int64(4), res.Usage.Tokens)
			},
		},
		{
			name:   "10 with findings but no verdict on stdout",
			review: true,
			body:   `echo '{"findings":[{"message":"add a test"},{"field":"no message"}],"usage":{"tokens":5}}'` + "\nexit 10",
			check: func(t *testing.T, res executors.ReviewResult, _ capsule.Usage, err error) {
				require.NoError(t, err)
				require.Equal(t, capsule.ChangesRequested, res.Verdict)
				require.Equal(t, []capsule.Finding{{Message: "add a test"}}, res.Findings)
				require.Equal(t, capsule.Usage{Tokens: 5}, res.Usage)
			},
		},
		{
			name:   "10 with a negative usage fails the call",
			review: true,
			body:   `echo '{"findings":[{"message":"add a test"}],"usage":{"tokens":-5}}'` + "\nexit 10",
			check: func(t *testing.T, res executors.ReviewResult, _ capsule.Usage, err error) {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Contains(t, failed.Detail, "stdout: invalid usage: -5 tokens / 0 dollars: tokens must not be negative")
				require.Zero(t, failed.Usage, "a negative usage is never charged")
				require.Zero(t, res.Usage)
			},
		},
		{
			name:   "0 with a negative usage fails the call",
			review: true,
			body:   `echo '{"verdict":"APPROVED","usage":{"dollars":-0.5}}'`,
			check: func(t *testing.T, res executors.ReviewResult, _ capsule.Usage, err error) {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Contains(t, failed.Detail, "malformed reply: invalid usage: 0 tokens / -0.5 dollars")
				require.Zero(t, failed.Usage)
			},
		},
		{
			name:   "1 with a negative usage is not charged",
			review: true,
			body:   `echo '{"status":"failed","error":"quota","usage":{"tokens":-9}}'` + "\nexit 1",
			check: func(t *testing.T, _ executors.ReviewResult, usage capsule.Usage, err error) {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Zero(t, failed.Usage)
			},
		},
		{
			name:   "10 without findings gets one from stderr",
			review: true,
			body:   "echo 'too vague' >&2\nexit 10",
			check: func(t *testing.T, res executors.ReviewResult, _ capsule.Usage, err error) {
				require.NoError(t, err)
				require.Equal(t, capsule.ChangesRequested, res.Verdict)
				require.Equal(t, []capsule.Finding{{Message: "needs refinement: too vague"}}, res.Findings)
			},
		},
		{
			name:   "0 reviewer verdict",
			review: true,
			body:   `echo '{"verdict":"APPROVED","usage":{"tokens":1}}'`,
			check: func(t *testing.T, res executors.ReviewResult, _ capsule.Usage, err error) {
				require.NoError(t, err)
				require.Equal(t, capsule.Approved, res.Verdict)
			},
		},
		{
			name:   "0 reviewer accepted",
			review: true,
			body:   `echo '{"status":"accepted"}'`,
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				var a *executors.AcceptedError
				require.ErrorAs(t, err, &a)
				require.True(t, strings.HasPrefix(a.Subject, executors.CompletionPrefix), a.Subject)
			},
		},
		{
			name:   "21 timeout",
			review: true,
			body:   "exit 21",
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				requireFailed(t, err, `command "agent": timeout (exit status 21)`)
			},
		},
		{
			name: "11 needs escalation",
			body: "exit 11",
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				requireFailed(t, err, `command "agent": needs escalation (exit status 11)`)
			},
		},
		{
			name: "20 interrupted",
			body: "exit 20",
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				requireFailed(t, err, `command "agent": interrupted (exit status 20)`)
			},
		},
		{
			name: "other status",
			body: "echo oops >&2\nexit 7",
			check: func(t *testing.T, _ executors.ReviewResult, _ capsule.Usage, err error) {
				requireFailed(t, err, `command "agent": exit status 7: oops`)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := shellScript(t, t.TempDir(), tt.body)
			if tt.review {
				res, err := cmd.Review(context.Background(), reviewRequest(t))
				tt.check(t, res, res.Usage, err)
				return
			}
			res, err := cmd.Execute(context.Background(), execRequest(t))
			tt.check(t, executors.ReviewResult{}, res.Usage, err)
		})
	}
}

func requireFailed(t *testing.T, err error, detail string) *executors.FailedError {
	t.Helper()
	var failed *executors.FailedError
	require.ErrorAs(t, err, &failed)
	if detail != "" {
		require.Equal(t, detail, failed.Detail)
	}
	return failed
}

func TestCommandOutputLimit(t *testing.T) {
	cmd := shellScript(t, t.TempDir(), `yes 'an endless artifact'`)
	cmd.MaxOutput = 1000
	start := time.Now()
	_, err := cmd.Execute(context.Background(), execRequest(t))
	requireFailed(t, err, `command "agent": output exceeds 1000 bytes`)
	require.Less(t, time.Since(start), 10*time.Second, "the program is killed, not waited for")
}

func TestCommandTimeoutKillsProcessGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	dir := t.TempDir()
	cmd := shellScript(t, dir, `sleep 60 &
echo $! > "$OUT/child"
echo 'still working' >&2
wait`)
	cmd.Timeout = time.Second
	_, err := cmd.Execute(context.Background(), execRequest(t))
	requireFailed(t, err, `command "agent": timeout after 1s: still working`)

	b, err := os.ReadFile(filepath.Join(dir, "child"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true // gone
		}
		// A zombie is dead too: its parent (init here) has yet to reap it.
		_, rest, _ := strings.Cut(string(stat), ") ")
		return strings.HasPrefix(rest, "Z")
	}, "the script's child %d outlived the timeout", pid)
}

func TestCommandCancelled(t *testing.T) {
	cmd := shellScript(t, t.TempDir(), `sleep 60`)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := cmd.Execute(ctx, execRequest(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var failed *executors.FailedError
	require.False(t, errors.As(err, &failed), "a cancelled run is not the executor's failure: %v", err)
}

func TestCommandNotFound(t *testing.T) {
	cmd := executors.Command{Path: filepath.Join(t.TempDir(), "missing")}
	_, err := cmd.Execute(context.Background(), execRequest(t))
	f := requireFailed(t, err, "")
	require.Contains(t, f.Detail, "no such file or directory")
}

// TestCommandGetsArtifactsWhole: a command has no NATS connection to fetch
// an artifact by reference, and its stdin no message limit: a prior
// artifact over the inline limit still reaches it whole.
func TestCommandGetsArtifactsWhole(t *testing.T) {
	dir := t.TempDir()
	cmd := shellScript(t, dir, `cat > "$OUT/stdin"
echo '{"content":1}'`)
	req := execRequest(t)
	big := json.RawMessage(`"` + strings.Repeat("z", 300<<10) + `"`)
	req.PriorArtifactRef = "artifact:" + req.Capsule.CapsuleID + "/1"
	req.PriorArtifact = &capsule.Artifact{Ref: req.PriorArtifactRef, SHA256: "s", Size: int64(len(big)), Content: big}
	_, err := cmd.Execute(context.Background(), req)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "stdin"))
	require.NoError(t, err)
	var call executors.ExecuteCall
	require.NoError(t, json.Unmarshal(b, &call))
	require.Equal(t, string(big), string(call.PriorArtifact.Content))
}
