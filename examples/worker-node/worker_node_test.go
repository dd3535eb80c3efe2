// Package workernode_test runs the Node.js worker of examples/worker-node
// against a real sagad pipeline: `npm ci` in a temporary copy, `node
// worker.mjs` on an embedded NATS server, and the demo capsule through all
// seven phases with the Node worker's artifact and review, answered at once
// and with --async.
package workernode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/internal/testreq"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

// requireNode finds node (18 or later, for util.parseArgs) and npm, or
// skips the test saying what to install (fails where every test must run:
// internal/testreq).
func requireNode(t *testing.T) (node, npm string) {
	t.Helper()
	const hint = "apt-get install nodejs npm"
	node = testreq.Program(t, hint, "node")
	npm = testreq.Program(t, hint, "npm")
	out, err := exec.Command(node, "--version").Output()
	require.NoError(t, err)
	major, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 2)[0])
	require.NoError(t, err, "node --version: %s", out)
	if major < 18 {
		testreq.Missing(t, "node 18 or later (found "+strings.TrimSpace(string(out))+")", hint)
	}
	return node, npm
}

// install copies the worker to a temporary directory and runs `npm ci`
// there, so the checkout gets no node_modules.
func install(t *testing.T, npm string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "worker.mjs"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci:\n%s", out)
	return dir
}

// startWorker runs the Node worker on url and returns once it serves.
func startWorker(t *testing.T, node, dir, url string, args ...string) {
	t.Helper()
	cmd := exec.Command(node, append([]string{"worker.mjs", "--nats-url", url}, args...)...)
	cmd.Dir = dir
	// The host's SAGA_* settings are not the test server's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SAGA_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = tlog{t, "worker stderr: "}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	serving := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			// One line per endpoint served; the test needs both.
			if strings.Contains(line, `"msg":"serving"`) && strings.Contains(line, `"endpoint":"review"`) {
				close(serving)
			}
			t.Log("worker: " + line)
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	select {
	case <-serving:
	case <-exited:
		t.Fatal("the node worker exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("the node worker did not serve within 30s")
	}
}

type tlog struct {
	t      testing.TB
	prefix string
}

func (w tlog) Write(b []byte) (int, error) { w.t.Log(w.prefix + string(b)); return len(b), nil }

// TestNodeWorkerEndToEnd: sagad configured like examples/sagad.json, the
// Node worker beside it, the demo capsule completes with its artifact.
func TestNodeWorkerEndToEnd(t *testing.T) {
	node, npm := requireNode(t)
	dir := install(t, npm)
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			s := natstest.RunServer(t)
			args := []string{"--agent-id", "node-worker-e2e"}
			if async {
				args = append(args, "--async")
			}
			startWorker(t, node, dir, s.ClientURL(), args...)
			endToEnd(t, s)
		})
	}
}

func endToEnd(t *testing.T, s *server.Server) {
	nc, js := natstest.Connect(t, s)
	b, err := os.ReadFile("../sagad.json")
	require.NoError(t, err)
	var cfg executors.Config
	require.NoError(t, json.Unmarshal(b, &cfg), "examples/sagad.json's executors and reviewers")
	reg, err := cfg.Build(nc)
	require.NoError(t, err)
	workspace, err := filepath.Abs("../..")
	require.NoError(t, err)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger:     slog.New(slog.NewTextHandler(tlog{t, ""}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Workspace:  workspace,
		Workers:    2,
		AckWait:    2 * time.Second,
		Heartbeat:  300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond,
		Executors:  reg,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	cl, err := client.NewClient(ctx, js)
	require.NoError(t, err)

	raw, err := os.ReadFile("../worker/demo-capsule.json")
	require.NoError(t, err)
	var c capsule.Capsule
	require.NoError(t, json.Unmarshal(raw, &c))
	_, err = cl.Publish(ctx, raw, "")
	require.NoError(t, err)

	var st client.Status
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		st, err = cl.Status(ctx, c.CapsuleID)
		return err == nil && st.State.Terminal()
	}, "capsule %s never ended (last %s)", c.CapsuleID, st.State)
	require.Equal(t, capsule.Completed, st.State, "halt: %s", st.HaltReason)
	require.Equal(t, 1, st.CyclesUsed)

	// The artifact is the Node worker's.
	kept, err := store.Open(ctx, js)
	require.NoError(t, err)
	b, err = kept.Artifacts.Bytes(ctx, store.ArtifactRef(c.CapsuleID, 1))
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.Artifact, b))
	var art capsule.Artifact
	require.NoError(t, json.Unmarshal(b, &art))
	var content struct {
		ProducedBy         string   `json:"produced_by"`
		AcceptanceCriteria []string `json:"acceptance_criteria"`
		Cycle              int      `json:"cycle"`
	}
	require.NoError(t, json.Unmarshal(art.Content, &content))
	require.Equal(t, "node-worker-e2e", content.ProducedBy)
	require.Equal(t, c.Spec.AcceptanceCriteria, content.AcceptanceCriteria)
	require.Equal(t, 1, content.Cycle)
	require.Equal(t, int64(len(c.Task.Title)+len(c.Task.Description)), art.Usage.Tokens)

	cp, err := cl.Checkpoint(ctx, c.CapsuleID)
	require.NoError(t, err)
	require.Len(t, cp.State.Reviews, 1)
	require.Equal(t, capsule.Approved, cp.State.Reviews[0].Verdict)
}

// TestNodeWorkerRepeatedCall: a repeated idempotency key gets the first
// answer, and with --async the completion goes out again with the latest
// call's token.
func TestNodeWorkerRepeatedCall(t *testing.T) {
	node, npm := requireNode(t)
	dir := install(t, npm)
	s := natstest.RunServer(t)
	startWorker(t, node, dir, s.ClientURL(), "--async")
	nc, _ := natstest.Connect(t, s)
	sub, err := nc.SubscribeSync(executors.CompletionPrefix + ">")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	raw, err := os.ReadFile("../worker/demo-capsule.json")
	require.NoError(t, err)
	c := new(capsule.Capsule)
	require.NoError(t, json.Unmarshal(raw, c))
	call := func() (executors.ExecuteCall, executors.ExecutorReply) {
		token, err := executors.NewCompletionToken()
		require.NoError(t, err)
		body, err := executors.NewExecuteCall(executors.Request{Capsule: c, Raw: raw, Cycle: 1, IdempotencyKey: c.CapsuleID + "/1", CompletionToken: token})
		require.NoError(t, err)
		data, err := json.Marshal(body)
		require.NoError(t, err)
		msg := nats.NewMsg("agents.demo.execute")
		msg.Data = data
		msg.Header.Set(executors.HeaderIdempotencyKey, c.CapsuleID+"/1")
		resp, err := nc.RequestMsg(msg, 10*time.Second)
		require.NoError(t, err)
		reply, err := executors.DecodeExecutorReply(resp.Data)
		require.NoError(t, err)
		return body, reply
	}
	completion := func() executors.Completion {
		msg, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, executors.CompletionSubject(c.CapsuleID, 1), msg.Subject)
		done, err := executors.DecodeCompletion(msg.Data)
		require.NoError(t, err)
		return done
	}

	first, reply := call()
	require.Equal(t, executors.StatusAccepted, reply.Status)
	done := completion()
	require.Equal(t, executors.KindExecute, done.Kind)
	require.Equal(t, first.CompletionToken, done.CompletionToken)

	second, reply := call()
	require.Equal(t, executors.StatusAccepted, reply.Status)
	again := completion()
	require.Equal(t, second.CompletionToken, again.CompletionToken, "the repeat's completion carries the latest token")
	require.JSONEq(t, string(done.Content), string(again.Content), "and the first answer")
}
