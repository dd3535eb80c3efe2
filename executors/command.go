package executors

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/tracing"
)

// Defaults of [Command].
const (
	DefaultCommandTimeout = 10 * time.Minute
	DefaultMaxOutput      = 4 << 20
	// stderrTail is how much of the end of stderr goes into failure details.
	stderrTail = 2 << 10
	// waitDelay bounds how long Wait waits for the output pipes after the
	// program exited or was killed (a stray grandchild may hold them).
	waitDelay = 5 * time.Second
)

// Exit statuses of a command, after the inter-layer protocol of the
// agentic composition hierarchy (§5).
const (
	ExitSuccess         = 0
	ExitFailure         = 1
	ExitDepthExceeded   = 2
	ExitHumanInput      = 3
	ExitNeedsRefinement = 10
	ExitNeedsEscalation = 11
	ExitPartialSuccess  = 12
	ExitInterrupted     = 20
	ExitTimeout         = 21
)

// Command runs a local program as an executor or a reviewer. The program is
// started directly, never through a shell, with the wire request
// ([ExecuteCall] or [ReviewCall]) on stdin and an environment of PATH and
// HOME (from sagad's), Env, and SAGA_CAPSULE_ID, SAGA_CYCLE,
// SAGA_IDEMPOTENCY_KEY, SAGA_TRACE_ID, SAGA_CALL (execute or review) and
// TRACEPARENT (the W3C traceparent of the call's span, for the program's own
// OpenTelemetry SDK to continue the capsule's trace); an executor call also
// gets SAGA_COMPLETION_TOKEN, the request's completion_token, and
// SAGA_OPERATOR_ANSWER, the text of its operator_answer; SAGA_CALL_TOKEN, its call_token
// (a child capsule's Saga-Parent-Token). Nothing of the
// capsule reaches its arguments.
//
// The exit status decides the answer:
//
//	0   stdout is the reply JSON ([ExecutorReply] / [ReviewerReply]; status may be omitted)
//	1   failure: a [*FailedError] with the reply's error or the tail of stderr
//	3   human input needed: a [*HumanInputError] (the capsule pauses, blocked_external)
//	10  needs refinement: a reviewer's CHANGES_REQUESTED (findings from stdout when it
//	    is a reply), an executor's failure
//	11  needs escalation, 20 interrupted, 21 timeout, anything else: a [*FailedError]
//	    whose ExitCode the failure policy reads ([Policy.Decide]: 1, 12 and 21 are
//	    retried, 11 pauses for a person)
//
// The program runs in its own process group, which is killed when Timeout
// passes, stdout exceeds MaxOutput or ctx is cancelled; on Linux the kernel
// also kills the program when sagad dies. On a non-zero exit, a stdout that
// parses as a reply still contributes its usage and error message.
type Command struct {
	// Path of the program; a name without a slash is looked up in PATH.
	Path string
	// Args are passed as they are.
	Args []string
	// Name identifies it in failure details. Defaults to Path.
	Name string
	// Timeout bounds one run. Defaults to [DefaultCommandTimeout].
	Timeout time.Duration
	// MaxOutput bounds stdout in bytes. Defaults to [DefaultMaxOutput].
	MaxOutput int64
	// Env holds extra KEY=VALUE variables.
	Env []string
	// Dir is the working directory. Defaults to sagad's.
	Dir string
	// CompletionTimeout is how long an accepted call's result may take (a
	// program may answer "accepted" too). Defaults to [DefaultCompletionTimeout].
	CompletionTimeout time.Duration
}

var (
	errCommandTimeout  = errors.New("command timeout")
	errOutputExceeded  = errors.New("command output exceeded")
	inheritedVariables = []string{"PATH", "HOME"}
)

// Execute runs the program as an executor.
func (c Command) Execute(ctx context.Context, req Request) (Result, error) {
	// A program's stdin has no message limit, and a local program has no
	// NATS connection to fetch by reference: artifacts go whole.
	req.InlineBytes = math.MaxInt64
	call, err := NewExecuteCall(req)
	if err != nil {
		return Result{}, err
	}
	meta := executeMeta(req)
	out, err := c.run(ctx, call, meta)
	if err != nil {
		return Result{}, err
	}
	who := c.who()
	if out.code == ExitSuccess {
		reply, err := DecodeExecutorReply(out.stdout)
		if err != nil {
			return Result{}, &FailedError{Detail: fmt.Sprintf("%s: stdout: %v", who, err)}
		}
		res, err := reply.Result()
		return res, finish(err, who, meta, c.CompletionTimeout)
	}
	partial := partialReply(out.stdout)
	return Result{Usage: partial.Usage}, c.exitError(out, partial)
}

// Review runs the program as a reviewer.
func (c Command) Review(ctx context.Context, req ReviewRequest) (ReviewResult, error) {
	call, err := NewReviewCall(req)
	if err != nil {
		return ReviewResult{}, err
	}
	meta := reviewMeta(req)
	out, err := c.run(ctx, call, meta)
	if err != nil {
		return ReviewResult{}, err
	}
	who := c.who()
	switch out.code {
	case ExitSuccess:
		reply, err := DecodeReviewerReply(out.stdout)
		if err != nil {
			return ReviewResult{}, &FailedError{Detail: fmt.Sprintf("%s: stdout: %v", who, err)}
		}
		res, err := reply.Result()
		return res, finish(err, who, meta, c.CompletionTimeout)
	case ExitNeedsRefinement:
		// The work needs another cycle: a CHANGES_REQUESTED verdict, whatever
		// verdict stdout carries.
		partial := partialReply(out.stdout)
		if err := usageOf(out.stdout); err != nil {
			// This exit is a verdict, not a failure: its usage would be
			// charged, so it must be sane.
			return ReviewResult{}, &FailedError{Detail: fmt.Sprintf("%s: stdout: %v", who, err)}
		}
		res := ReviewResult{Verdict: capsule.ChangesRequested, Findings: capsule.CapFindings(partial.Findings, capsule.MaxFindings), Usage: partial.Usage}
		if len(res.Findings) == 0 {
			res.Findings = []capsule.Finding{{Message: "needs refinement" + suffix(cmp.Or(partial.Error, out.stderr))}}
		}
		return res, nil
	}
	partial := partialReply(out.stdout)
	return ReviewResult{Usage: partial.Usage}, c.exitError(out, partial)
}

// partialReply reads what it can from the stdout of a program that exited
// non-zero: a sane usage, the error message, the findings that have a
// message. Anything else, or stdout that is no reply at all, is ignored.
func partialReply(stdout []byte) ReviewerReply {
	var r ReviewerReply
	_ = json.Unmarshal(stdout, &r)
	if checkUsage(r.Usage) != nil {
		r.Usage = capsule.Usage{}
	}
	r.Findings = slices.DeleteFunc(r.Findings, func(f capsule.Finding) bool { return strings.TrimSpace(f.Message) == "" })
	return r
}

// usageOf returns the error of an invalid usage in stdout, which
// [partialReply] replaces with zero; nil when stdout has none or no reply.
func usageOf(stdout []byte) error {
	var r struct {
		Usage capsule.Usage `json:"usage"`
	}
	if json.Unmarshal(stdout, &r) != nil {
		return nil
	}
	return r.Usage.Validate()
}

func (c Command) who() string { return fmt.Sprintf("command %q", cmp.Or(c.Name, c.Path)) }

// exitError maps a non-zero exit status; partial is what stdout said.
func (c Command) exitError(out runOutput, partial ReviewerReply) error {
	detail, usage := strings.TrimSpace(cmp.Or(partial.Error, out.stderr)), partial.Usage
	var what string
	switch out.code {
	case ExitHumanInput:
		return &HumanInputError{Detail: detail, Usage: usage}
	case ExitFailure:
		what = "failed (exit status 1)"
	case ExitNeedsRefinement:
		what = "needs refinement (exit status 10)"
	case ExitNeedsEscalation:
		what = "needs escalation (exit status 11)"
	case ExitInterrupted:
		what = "interrupted (exit status 20)"
	case ExitTimeout:
		what = "timeout (exit status 21)"
	case ExitDepthExceeded:
		what = "depth exceeded (exit status 2)"
	case ExitPartialSuccess:
		what = "partial success (exit status 12)"
	default:
		what = out.status
	}
	return &FailedError{Detail: c.who() + ": " + what + suffix(detail), Usage: usage, ExitCode: out.code, Stderr: out.stderr}
}

// suffix formats a detail for a one-line failure: ": line; line", or "".
func suffix(detail string) string {
	var lines []string
	for _, l := range strings.Split(detail, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return ": " + strings.Join(lines, "; ")
}

// runOutput is how a run ended: an exit code (status describes it) with its
// stdout and the tail of its stderr.
type runOutput struct {
	code   int
	status string
	stdout []byte
	stderr string
}

// run starts the program and waits for it. Its error is a [*FailedError]
// when the program could not run to an exit status of its own (timeout,
// output limit, signal, start failure), or the cancellation of ctx.
func (c Command) run(ctx context.Context, body any, meta callMeta) (runOutput, error) {
	who := c.who()
	in, err := json.Marshal(body)
	if err != nil {
		return runOutput{}, fmt.Errorf("%s: encode request: %w", who, err)
	}
	timeout := cmp.Or(c.Timeout, DefaultCommandTimeout)
	limit := cmp.Or(c.MaxOutput, DefaultMaxOutput)

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	runCtx, cancelTimeout := context.WithTimeoutCause(runCtx, timeout, errCommandTimeout)
	defer cancelTimeout()

	cmd := exec.CommandContext(runCtx, c.Path, c.Args...)
	cmd.Stdin = bytes.NewReader(in)
	stdout := &limitedBuffer{limit: limit, overflow: func() { cancel(errOutputExceeded) }}
	stderr := &tailBuffer{max: stderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = c.environ(meta)
	cmd.Dir = c.Dir
	cmd.WaitDelay = waitDelay
	ownProcessGroup(cmd)

	unpin := pinThread()
	err = cmd.Run()
	unpin()
	out := runOutput{stdout: stdout.Bytes(), stderr: stderr.String()}
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s: %w", who, ctx.Err())
	}
	switch cause := context.Cause(runCtx); {
	case stdout.exceeded():
		return out, &FailedError{Detail: fmt.Sprintf("%s: output exceeds %d bytes", who, limit)}
	case err != nil && errors.Is(cause, errCommandTimeout):
		return out, &FailedError{Detail: fmt.Sprintf("%s: timeout after %s", who, timeout) + suffix(out.stderr), Timeout: true, Stderr: out.stderr}
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		out.code, out.status = 0, "exit status 0"
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		out.code, out.status = exitErr.ExitCode(), "exit status "+strconv.Itoa(exitErr.ExitCode())
	case errors.As(err, &exitErr):
		return out, &FailedError{Detail: fmt.Sprintf("%s: %v", who, exitErr) + suffix(out.stderr)}
	default:
		return out, &FailedError{Detail: fmt.Sprintf("%s: %v", who, err)}
	}
	return out, nil
}

// environ is the program's whole environment: nothing of sagad's but PATH and
// HOME. The SAGA_ variables come last so that Env cannot override them.
func (c Command) environ(meta callMeta) []string {
	env := make([]string, 0, len(inheritedVariables)+len(c.Env)+8)
	for _, k := range inheritedVariables {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, c.Env...)
	env = append(env,
		"SAGA_CAPSULE_ID="+meta.capsuleID,
		"SAGA_CYCLE="+strconv.Itoa(meta.cycle),
		"SAGA_IDEMPOTENCY_KEY="+meta.idempotencyKey,
		"SAGA_TRACE_ID="+meta.traceID,
		"SAGA_CALL="+string(meta.kind),
		// Set even when empty, so a value in Env never poses as the call's.
		tracing.EnvTraceparent+"="+meta.traceparent,
	)
	if meta.kind == KindExecute {
		// Set even when empty, so a value in Env never poses as the call's.
		env = append(env, "SAGA_COMPLETION_TOKEN="+meta.completionToken, "SAGA_PRIOR_ARTIFACT_REF="+meta.priorArtifactRef,
			"SAGA_OPERATOR_ANSWER="+meta.operatorAnswer, "SAGA_CALL_TOKEN="+meta.callToken)
	}
	return env
}

// limitedBuffer keeps the first limit bytes written to it and calls overflow
// once when more arrive. It never fails a write, so the program is stopped by
// the kill overflow triggers rather than blocked on a full pipe.
type limitedBuffer struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	limit    int64
	over     bool
	overflow func()
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over {
		return len(p), nil
	}
	if room := b.limit - int64(b.buf.Len()); int64(len(p)) > room {
		b.buf.Write(p[:room])
		b.over = true
		b.overflow()
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}

func (b *limitedBuffer) exceeded() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.over
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(strings.ToValidUTF8(string(b.buf), "\uFFFD"))
}
