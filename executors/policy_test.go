package executors

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPolicyDecide(t *testing.T) {
	exit := func(code int) error { return &FailedError{Detail: "x", ExitCode: code} }
	custom := Policy{FailureRetries: 2, SelfHeal: 0}
	for _, tc := range []struct {
		name    string
		p       Policy
		err     error
		retries int
		want    Action
	}{
		{"exit 1 first failure retries", DefaultPolicy, exit(ExitFailure), 0, ActionRetry},
		{"exit 1 retried once halts", DefaultPolicy, exit(ExitFailure), 1, ActionHalt},
		{"exit 21 retries once", DefaultPolicy, exit(ExitTimeout), 0, ActionRetry},
		{"exit 21 then halts", DefaultPolicy, exit(ExitTimeout), 1, ActionHalt},
		{"command timeout retries", DefaultPolicy, &FailedError{Timeout: true}, 0, ActionRetry},
		{"exit 12 self-heals", DefaultPolicy, exit(ExitPartialSuccess), 1, ActionRetry},
		{"exit 12 after self_heal halts", DefaultPolicy, exit(ExitPartialSuccess), 2, ActionHalt},
		{"exit 11 pauses", DefaultPolicy, exit(ExitNeedsEscalation), 0, ActionPause},
		{"exit 11 pauses after retries too", DefaultPolicy, exit(ExitNeedsEscalation), 5, ActionPause},
		{"exit 2 halts", DefaultPolicy, exit(ExitDepthExceeded), 0, ActionHalt},
		{"exit 10 halts", DefaultPolicy, exit(ExitNeedsRefinement), 0, ActionHalt},
		{"exit 20 halts", DefaultPolicy, exit(ExitInterrupted), 0, ActionHalt},
		{"exit 7 halts", DefaultPolicy, exit(7), 0, ActionHalt},
		{"nats retryable retries", DefaultPolicy, &FailedError{Retryable: true}, 0, ActionRetry},
		{"nats retryable up to self_heal", DefaultPolicy, &FailedError{Retryable: true}, 2, ActionHalt},
		{"nats not retryable halts", DefaultPolicy, &FailedError{Detail: "no"}, 0, ActionHalt},
		{"wrapped failure", DefaultPolicy, errors.Join(errors.New("ctx"), exit(ExitFailure)), 0, ActionRetry},
		{"human input is not the policy's", DefaultPolicy, &HumanInputError{}, 0, ActionHalt},
		{"transport error halts", DefaultPolicy, errors.New("nats: timeout"), 0, ActionHalt},
		{"failure_retries 2", custom, exit(ExitFailure), 1, ActionRetry},
		{"self_heal 0 halts exit 12", custom, exit(ExitPartialSuccess), 0, ActionHalt},
		{"self_heal 0 halts retryable", custom, &FailedError{Retryable: true}, 0, ActionHalt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Decide(tc.err, tc.retries); got != tc.want {
				t.Fatalf("Decide = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNewPreviousFailure(t *testing.T) {
	long := strings.Repeat("é", MaxPreviousFailure)
	pf := NewPreviousFailure(1, &FailedError{Detail: "boom", ExitCode: 12, Stderr: long})
	if pf.Attempt != 1 || pf.ExitCode != 12 || pf.Error != "boom" {
		t.Fatalf("got %+v", pf)
	}
	if len(pf.StderrTail) > MaxPreviousFailure || !utf8.ValidString(pf.StderrTail) {
		t.Fatalf("stderr tail: %d bytes, valid %v", len(pf.StderrTail), utf8.ValidString(pf.StderrTail))
	}
	if pf := NewPreviousFailure(2, errors.New("plain")); pf.Error != "plain" || pf.ExitCode != 0 {
		t.Fatalf("got %+v", pf)
	}
}

func TestCommandExitCarriesCode(t *testing.T) {
	c := Command{Path: "/bin/sh", Args: []string{"-c", "echo oops >&2; exit 12"}}
	_, err := c.Execute(t.Context(), Request{Capsule: nil, Raw: []byte(`{"capsule_id":"c"}`), Cycle: 1})
	var f *FailedError
	if !errors.As(err, &f) || f.ExitCode != 12 || !strings.Contains(f.Stderr, "oops") {
		t.Fatalf("err = %v (%+v)", err, f)
	}
	if DefaultPolicy.Decide(err, 0) != ActionRetry {
		t.Fatal("exit 12 should retry")
	}
}

func TestExecutorReplyRetryable(t *testing.T) {
	r, err := DecodeExecutorReply([]byte(`{"status":"failed","error":"rate limited","retryable":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Result()
	var f *FailedError
	if !errors.As(err, &f) || !f.Retryable {
		t.Fatalf("err = %v", err)
	}
	c, err := DecodeCompletion([]byte(`{"kind":"execute","status":"failed","error":"x","retryable":true}`))
	if err != nil || !c.ExecutorReply().Retryable {
		t.Fatalf("completion: %v %+v", err, c)
	}
}

func TestExecuteCallPreviousFailure(t *testing.T) {
	call, err := NewExecuteCall(Request{Raw: []byte(`{}`), Cycle: 1, PreviousFailure: &PreviousFailure{Attempt: 1, ExitCode: 1, Error: "e"}})
	if err != nil || call.PreviousFailure == nil || call.PreviousFailure.ExitCode != 1 {
		t.Fatalf("%v %+v", err, call)
	}
}

func TestConfigPolicyKnobs(t *testing.T) {
	n := func(v int) *int { return &v }
	c := Config{Executors: map[string]Endpoint{
		"a": {Type: EndpointStub, FailureRetries: n(-1), SelfHeal: n(MaxFailureRetries + 1)},
	}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `executors["a"].failure_retries: -1: want 0 to 5`) ||
		!strings.Contains(err.Error(), `executors["a"].self_heal: 6: want 0 to 5`) {
		t.Fatalf("err = %v", err)
	}
	c = Config{Reviewers: map[string]Endpoint{"r": {Type: EndpointStub, SelfHeal: n(9)}}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `reviewers["r"].self_heal: 9: want 0 to 5`) {
		t.Fatalf("err = %v", err)
	}
	var ep Endpoint
	if err := json.Unmarshal([]byte(`{"type":"stub","failure_retries":0,"self_heal":4}`), &ep); err != nil || *ep.FailureRetries != 0 || *ep.SelfHeal != 4 {
		t.Fatalf("decode: %v %+v", err, ep)
	}
	c = Config{Executors: map[string]Endpoint{"a": {Type: EndpointStub, FailureRetries: n(3)}}}
	r, err := c.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Policy("a"); got != (Policy{FailureRetries: 3, SelfHeal: DefaultSelfHeal}) {
		t.Fatalf("policy = %+v", got)
	}
	if got := r.Policy("other"); got != DefaultPolicy {
		t.Fatalf("default policy = %+v", got)
	}
	c = Config{Reviewers: map[string]Endpoint{"r": {Type: EndpointStub, SelfHeal: n(0)}}}
	if r, err = c.Build(nil); err != nil {
		t.Fatal(err)
	}
	if got := r.ReviewerPolicy("r"); got != (Policy{FailureRetries: DefaultFailureRetries, SelfHeal: 0}) {
		t.Fatalf("reviewer policy = %+v", got)
	}
	if got := r.ReviewerPolicy("other"); got != DefaultPolicy {
		t.Fatalf("default reviewer policy = %+v", got)
	}
}

func TestReviewCallPreviousFailure(t *testing.T) {
	call, err := NewReviewCall(ReviewRequest{Raw: []byte(`{}`), Cycle: 1, PreviousFailure: &PreviousFailure{Attempt: 2, ExitCode: 12, Error: "e"}})
	if err != nil || call.PreviousFailure == nil || call.PreviousFailure.Attempt != 2 {
		t.Fatalf("%v %+v", err, call)
	}
	b, err := json.Marshal(call)
	if err != nil || !strings.Contains(string(b), `"previous_failure":{"attempt":2,"exit_code":12,"error":"e"}`) {
		t.Fatalf("%v %s", err, b)
	}
	call, _ = NewReviewCall(ReviewRequest{Raw: []byte(`{}`), Cycle: 1})
	if b, _ := json.Marshal(call); strings.Contains(string(b), "previous_failure") {
		t.Fatalf("a first attempt carries no previous_failure: %s", b)
	}
}
