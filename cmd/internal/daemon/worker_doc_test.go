package daemon

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/testreq"
)

const workerDoc = "../../../docs/WORKER.md"

// workerDocConfig routes the page's executor kind and reviewer id.
const workerDocConfig = `{
  "executors": {"lint": {"type": "nats", "subject": "agents.lint.execute", "timeout": "10s", "retries": 1}},
  "reviewers": {"lint-reviewer": {"type": "nats", "subject": "agents.lint.review", "timeout": "10s", "retries": 1}}
}`

// fencedBlock returns the one fenced code block of lang in doc.
func fencedBlock(t *testing.T, doc, lang string) string {
	t.Helper()
	blocks := regexp.MustCompile("(?ms)^```"+lang+"\n(.*?)^```$").FindAllStringSubmatch(doc, -1)
	require.Len(t, blocks, 1, "%s has one ```%s block", workerDoc, lang)
	return blocks[0][1]
}

// TestWorkerDocSnippets: the Go and Node.js workers of docs/WORKER.md, as
// printed, log in to sagad's embedded server with the NKey seeds sagad
// wrote for their roles and carry a capsule to completed: the Go one as the
// executor (built from the page's block in this module), the Node one as
// executor and reviewer (run with node after `npm ci` of the Node
// example's pinned nats package).
func TestWorkerDocSnippets(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(workerDoc)
	require.NoError(t, err)
	doc := string(b)
	goSrc, jsSrc := fencedBlock(t, doc, "go"), fencedBlock(t, doc, "js")

	dataDir := t.TempDir()
	cfg, err := parseConfig([]string{
		"--config", writeConfig(t, workerDocConfig),
		"--nats-listen", "127.0.0.1:-1",
		"--data-dir", dataDir,
		"--workspace", capsuletest.Workspace(t),
		"--http-listen", "off",
		"--log-level", "warn",
		"--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	d := start(t, cfg)
	_, c := connect(t, d.url, dataDir)
	seed := func(role string) string { return filepath.Join(CredsDir(dataDir), role+natsconn.SeedExt) }
	runs := func(doc capsuletest.Doc) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := c.Publish(ctx, doc.Sealed(t), "")
		require.NoError(t, err)
		s, err := c.Wait(ctx, doc.ID())
		require.NoError(t, err)
		require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	}

	t.Run("go", func(t *testing.T) {
		// The block is a main package of this module (it imports sagad's
		// wire types): an overlay puts it in one without writing to the
		// checkout.
		dir := t.TempDir()
		src := filepath.Join(dir, "main.go")
		require.NoError(t, os.WriteFile(src, []byte(goSrc), 0o600))
		pkg, err := filepath.Abs("testdata/workerdoc")
		require.NoError(t, err)
		overlay := filepath.Join(dir, "overlay.json")
		require.NoError(t, os.WriteFile(overlay, []byte(`{"Replace":{"`+filepath.Join(pkg, "main.go")+`":"`+src+`"}}`), 0o600))
		bin := filepath.Join(dir, "worker")
		gobin := testreq.Program(t, "Go on PATH (go test puts it there)", "go")
		out, err := exec.Command(gobin, "build", "-overlay", overlay, "-o", bin, pkg).CombinedOutput()
		require.NoError(t, err, "docs/WORKER.md's Go worker does not build:\n%s", out)

		startProgram(t, exec.Command(bin), "SAGA_NATS_URL="+d.url, "SAGA_NATS_NKEY="+seed("executor-lint"))
		waitServing(t, d.url, seed("executor-lint"), "my-worker")
		runs(capsuletest.New().Set("task.kind", "lint"))
	})

	t.Run("node", func(t *testing.T) {
		const hint = "apt-get install nodejs npm"
		node, npm := testreq.Program(t, hint, "node"), testreq.Program(t, hint, "npm")
		dir := t.TempDir()
		for _, f := range []string{"package.json", "package-lock.json"} {
			b, err := os.ReadFile(filepath.Join("../../../examples/worker-node", f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "worker.mjs"), []byte(jsSrc), 0o600))
		out, err := exec.Command(node, "--check", filepath.Join(dir, "worker.mjs")).CombinedOutput()
		require.NoError(t, err, "docs/WORKER.md's Node worker does not parse:\n%s", out)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		npmCI := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		npmCI.Dir = dir
		out, err = npmCI.CombinedOutput()
		require.NoError(t, err, "npm ci:\n%s", out)

		cmd := exec.Command(node, "worker.mjs")
		cmd.Dir = dir
		startProgram(t, cmd, "SAGA_NATS_URL="+d.url,
			"SAGA_EXECUTOR_NKEY="+seed("executor-lint"), "SAGA_REVIEWER_NKEY="+seed("reviewer-lint-reviewer"))
		waitServing(t, d.url, seed("executor-lint"), "my-worker")
		waitServing(t, d.url, seed("reviewer-lint-reviewer"), "my-reviewer")
		runs(capsuletest.New().Set("task.kind", "lint").Set("review.reviewer_agent_id", "lint-reviewer"))
	})
}

// startProgram starts cmd with env (and the environment without the host's
// SAGA_* settings), its output in the test log, and stops it when the test
// ends.
func startProgram(t *testing.T, cmd *exec.Cmd, env ...string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SAGA_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = tlogWriter{t}, tlogWriter{t}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
}

// waitServing waits until the micro service name answers a ping in the
// account of the role whose seed is given: then sagad's calls reach it.
func waitServing(t *testing.T, url, seed, name string) {
	t.Helper()
	nc, err := natsconn.Options{URL: url, NKey: seed}.Connect()
	require.NoError(t, err)
	defer nc.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := nc.Request("$SRV.PING."+name, nil, time.Second)
		if err == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "%s does not serve: %v", name, err)
		if errors.Is(err, nats.ErrNoResponders) {
			time.Sleep(100 * time.Millisecond) // answered at once: poll, not spin
		}
	}
}
