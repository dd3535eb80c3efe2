package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

const (
	testCapsuleID = "0f8fad5b-d9cb-469f-a165-70867728950e"
	testDepID     = "01HZY8J6Q4W3V0D7T1N9K2M5PC"
	testWaveID    = "wave-7"
)

var testCreated = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// validCapsule passes every absolute rule under the default config with
// newFacts().
func validCapsule() *capsule.Capsule {
	approvedAt := testCreated.Add(-time.Hour)
	return &capsule.Capsule{
		SchemaVersion:   "1.0",
		CapsuleID:       testCapsuleID,
		WaveID:          testWaveID,
		TraceID:         "4bf92f3577b34da6a3ce929d0e0e4736",
		CreatedAt:       testCreated,
		Deadline:        testCreated.Add(48 * time.Hour),
		ProducerAgentID: "agent.writer",
		Task: capsule.Task{
			Kind:        "stub",
			Title:       "Add a greeting",
			Description: "Write greet.go so that the binary greets the user.",
		},
		Spec: capsule.Spec{
			Approved:           true,
			ApprovedBy:         "human:alice",
			ApprovedAt:         &approvedAt,
			AcceptanceCriteria: []string{"greets in English", "exits with status zero"},
			ProblemStatement:   "The binary prints nothing.",
			DefinitionOfDone:   "Tests pass and the reviewer approves.",
		},
		ContextRefs: []string{"file:docs/design.md", "artifact:" + testDepID + "/1", "kv:config/greeting"},
		Target:      "file:src/greet/greet.go",
		Constraints: capsule.Constraints{
			ResourceLocksRequired: []string{"src/greet"},
			AllowedPaths:          []string{"src", "docs"},
			ForbiddenPaths:        []string{"src/vendor"},
			Network:               capsule.Network{Mode: "none"},
		},
		Budget:    capsule.Budget{Tokens: 50_000, Dollars: 2.5},
		Review:    capsule.ReviewPolicy{ReviewerAgentID: testReviewer, MaxCycles: 3},
		DependsOn: []string{testDepID},
		Metadata:  json.RawMessage(`{"team":"platform"}`),
		Integrity: capsule.Integrity{SHA256: strings.Repeat("ab", 32)},
	}
}

// fakeFacts answers Facts from fields; set an err field to make a lookup fail.
type fakeFacts struct {
	conflict    bool
	conflictErr error
	wave        WaveInfo
	waveOK      bool
	waveErr     error
	notDone     map[string]bool
	depErr      error
}

// newFacts: no id conflict, an open wave with room, every dependency done.
func newFacts() *fakeFacts {
	return &fakeFacts{
		wave: WaveInfo{
			TokensCap:  1_000_000,
			DollarsCap: 100,
			Used:       capsule.Usage{Tokens: 100_000, Dollars: 10},
		},
		waveOK:  true,
		notDone: map[string]bool{},
	}
}

func (f *fakeFacts) IDConflict(context.Context, string, string) (bool, error) {
	return f.conflict, f.conflictErr
}

func (f *fakeFacts) Wave(context.Context, string) (WaveInfo, bool, error) {
	return f.wave, f.waveOK, f.waveErr
}

func (f *fakeFacts) DependencyDone(_ context.Context, id string) (bool, error) {
	return !f.notDone[id], f.depErr
}

// testReviewer is the valid capsule's reviewer, configured by [input].
const testReviewer = "agent.reviewer"

// input encodes c as the raw bytes a producer would have sent.
func input(t *testing.T, c *capsule.Capsule, cfg Config, facts Facts) Input {
	t.Helper()
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	if cfg.ReviewerIDs == nil {
		cfg.ReviewerIDs = []string{testReviewer}
	}
	return Input{Capsule: c, Raw: raw, Config: cfg, Facts: facts, Now: testCreated}
}

func absoluteNumbers() []int {
	var ns []int
	for _, r := range Constitution {
		if r.Kind == Absolute {
			ns = append(ns, r.Number)
		}
	}
	return ns
}

func TestValidCapsulePasses(t *testing.T) {
	t.Parallel()
	res := Evaluate(t.Context(), input(t, validCapsule(), Config{}, newFacts()))
	require.Empty(t, res.Violated)
	require.Empty(t, res.Findings)
	require.Empty(t, res.NotEvaluated)
	require.Empty(t, res.Errors)
	require.NoError(t, res.Err())
	require.True(t, res.Passed())
	require.True(t, res.Halt().IsZero())
}

// ruleCase mutates the valid capsule, config or facts; want is the exact list
// of violated rules (nil: the capsule still passes).
type ruleCase struct {
	name   string
	mutate func(c *capsule.Capsule)
	config func(cfg *Config)
	facts  func(f *fakeFacts)
	want   []int
	// absent is text that must not appear in any finding (Rule 9 secrets).
	absent string
}

var ruleCases = []ruleCase{
	// Rule 1.
	{name: "1 unsupported major", mutate: func(c *capsule.Capsule) { c.SchemaVersion = "2.0" }, want: []int{1}},
	{name: "1 no numeric major", mutate: func(c *capsule.Capsule) { c.SchemaVersion = "v1.0" }, want: []int{1}},
	{name: "1 empty version", mutate: func(c *capsule.Capsule) { c.SchemaVersion = "" }, want: []int{1}},
	{name: "1 configured major passes", mutate: func(c *capsule.Capsule) { c.SchemaVersion = "2.3" },
		config: func(cfg *Config) { cfg.SupportedMajors = []int{1, 2} }},
	// Rule 2.
	{name: "2 malformed id", mutate: func(c *capsule.Capsule) { c.CapsuleID = "capsule-42" }, want: []int{2}},
	{name: "2 ULID with I", mutate: func(c *capsule.Capsule) { c.CapsuleID = "01HZY8J6Q4W3V0D7T1N9K2M5PI" }, want: []int{2}},
	{name: "2 id conflict", facts: func(f *fakeFacts) { f.conflict = true }, want: []int{2}},
	{name: "2 ULID passes", mutate: func(c *capsule.Capsule) { c.CapsuleID = "01J0000000000000000000000Z" }},
	// Rule 3.
	{name: "3 malformed producer", mutate: func(c *capsule.Capsule) { c.ProducerAgentID = "bad id!" }, want: []int{3}},
	{name: "3 empty producer", mutate: func(c *capsule.Capsule) { c.ProducerAgentID = "" }, want: []int{3}},
	{name: "3 not in registry", config: func(cfg *Config) { cfg.AgentRegistry = []string{"agent.other"} }, want: []int{3}},
	{name: "3 in registry passes", config: func(cfg *Config) { cfg.AgentRegistry = []string{"agent.other", "agent.writer"} }},
	// Rule 4.
	{name: "4 self approval", mutate: func(c *capsule.Capsule) { c.Spec.ApprovedBy = "agent.writer" }, want: []int{4}},
	{name: "4 self approval padded", mutate: func(c *capsule.Capsule) { c.Spec.ApprovedBy = " agent.writer " }, want: []int{4}},
	// Rule 5.
	{name: "5 target and lock outside", mutate: func(c *capsule.Capsule) { c.Constraints.AllowedPaths = []string{"docs"} }, want: []int{5}},
	{name: "5 prefix is not containment", mutate: func(c *capsule.Capsule) { c.Constraints.AllowedPaths = []string{"sr", "docs"} }, want: []int{5}},
	{name: "5 no allowed paths passes", mutate: func(c *capsule.Capsule) { c.Constraints.AllowedPaths = nil }},
	{name: "5 whole workspace passes", mutate: func(c *capsule.Capsule) { c.Constraints.AllowedPaths = []string{"."} }},
	// Rule 6.
	{name: "6 lock inside forbidden", mutate: func(c *capsule.Capsule) { c.Constraints.ForbiddenPaths = []string{"src/greet"} }, want: []int{6}},
	{name: "6 deny list ignoring case", config: func(cfg *Config) { cfg.DenyPaths = []string{"SRC/Greet"} }, want: []int{6}},
	{name: "6 default deny list", mutate: func(c *capsule.Capsule) {
		c.Constraints.AllowedPaths = nil
		c.Constraints.ResourceLocksRequired = append(c.Constraints.ResourceLocksRequired, ".git/hooks")
	}, want: []int{6}},
	{name: "6 deny list disabled passes", mutate: func(c *capsule.Capsule) {
		c.Constraints.AllowedPaths = nil
		c.Constraints.ResourceLocksRequired = append(c.Constraints.ResourceLocksRequired, ".git/hooks")
	}, config: func(cfg *Config) { cfg.DenyPaths = []string{} }},
	// Rule 7.
	{name: "7 dotdot in context ref", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "file:docs/../README.md")
	}, want: []int{7}},
	{name: "7 absolute context ref", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "file:/etc/hosts")
	}, want: []int{7}},
	{name: "7 control char in ref", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "kv:config/x\x01y")
	}, want: []int{7}},
	{name: "7 invalid UTF-8 in ref", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "kv:config/\xff")
	}, want: []int{7}},
	{name: "7 dotdot target still inside", mutate: func(c *capsule.Capsule) {
		c.Target = "file:src/greet/../greet/greet.go"
	}, want: []int{7}},
	{name: "7 absolute allowed path", mutate: func(c *capsule.Capsule) {
		c.Constraints.AllowedPaths = append(c.Constraints.AllowedPaths, "/etc")
	}, want: []int{7}},
	{name: "7 windows forbidden path", mutate: func(c *capsule.Capsule) {
		c.Constraints.ForbiddenPaths = append(c.Constraints.ForbiddenPaths, `C:\temp`)
	}, want: []int{7}},
	// Rule 8.
	{name: "8 target not locked", mutate: func(c *capsule.Capsule) { c.Target = "file:src/other.go" }, want: []int{8}},
	{name: "8 non-file target exempt", mutate: func(c *capsule.Capsule) {
		c.Target = "artifact:" + testDepID + "/report"
		c.Constraints.ResourceLocksRequired = nil
	}},
	// Rule 9.
	{name: "9 aws key in description", mutate: func(c *capsule.Capsule) {
		c.Task.Description = "upload with AKIAIOSFODNN7EXAMPLE please"
	}, want: []int{9}, absent: "AKIAIOSFODNN7EXAMPLE"},
	{name: "9 private key in metadata", mutate: func(c *capsule.Capsule) {
		c.Metadata = json.RawMessage(`{"notes":"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"}`)
	}, want: []int{9}, absent: "MIIEowIBAAKCAQEA"},
	{name: "9 bearer token in title", mutate: func(c *capsule.Capsule) {
		c.Task.Title = "curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123'"
	}, want: []int{9}, absent: "abcdefghijklmnopqrstuvwxyz0123"},
	{name: "9 password assignment", mutate: func(c *capsule.Capsule) {
		c.Spec.ProblemStatement = "connect with PASSWORD=hunter2 to the db"
	}, want: []int{9}, absent: "hunter2"},
	{name: "9 token assignment in a ref", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "kv:config/api?token=s3cr3tvalue")
	}, want: []int{9}, absent: "s3cr3tvalue"},
	{name: "9 github token", mutate: func(c *capsule.Capsule) {
		c.Task.Description = "use ghp_" + strings.Repeat("a1B2", 9)
	}, want: []int{9}, absent: strings.Repeat("a1B2", 9)},
	{name: "9 slack token", mutate: func(c *capsule.Capsule) {
		c.Task.Description = "post via xoxb-1234567890-abcdef"
	}, want: []int{9}, absent: "1234567890-abcdef"},
	{name: "9 credential member", mutate: func(c *capsule.Capsule) {
		c.Metadata = json.RawMessage(`{"db":{"Password":"hunter2"}}`)
	}, want: []int{9}, absent: "hunter2"},
	{name: "9 secret as member name", mutate: func(c *capsule.Capsule) {
		c.Metadata = json.RawMessage(`{"AKIAIOSFODNN7EXAMPLE":1}`)
	}, want: []int{9}, absent: "AKIAIOSFODNN7EXAMPLE"},
	{name: "9 escaped secret", mutate: func(c *capsule.Capsule) {
		c.Metadata = json.RawMessage(`{"n":"\u0041KIAIOSFODNN7EXAMPLE"}`)
	}, want: []int{9}, absent: "IOSFODNN7EXAMPLE"},
	{name: "9 secret hidden by duplicate member", mutate: func(c *capsule.Capsule) {
		c.Metadata = json.RawMessage(`{"n":"AKIAIOSFODNN7EXAMPLE","n":"harmless"}`)
	}, want: []int{9}, absent: "AKIAIOSFODNN7EXAMPLE"},
	{name: "9 aws secret access key", mutate: func(c *capsule.Capsule) {
		c.Task.Description = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	}, want: []int{9}, absent: "wJalrXUtnFEMI"},
	{name: "9 aws secret key member", mutate: func(c *capsule.Capsule) {
		c.Metadata = json.RawMessage(`{"aws":{"aws_secret_access_key":"wJalrXUtnFEMI"}}`)
	}, want: []int{9}, absent: "wJalrXUtnFEMI"},
	{name: "9 password in a database url", mutate: func(c *capsule.Capsule) {
		c.Spec.DefinitionOfDone = "migrations run against mongodb+srv://admin:Pa55w0rd@cluster0.example.net/app"
	}, want: []int{9}, absent: "Pa55w0rd"},
	{name: "9 database url without password passes", mutate: func(c *capsule.Capsule) {
		c.Spec.DefinitionOfDone = "migrations run against postgres://app@db/app and postgres://db:5432/app; password_policy=strict"
	}},
	{name: "9 blank credential member passes", mutate: func(c *capsule.Capsule) {
		c.Metadata = json.RawMessage(`{"next_token":""}`)
	}},
	// Rule 10.
	{name: "10 capsule bytes", config: func(cfg *Config) { cfg.MaxCapsuleBytes = 200 }, want: []int{10}},
	{name: "10 context refs", config: func(cfg *Config) { cfg.MaxContextRefs = 2 }, want: []int{10}},
	{name: "10 acceptance criteria", config: func(cfg *Config) { cfg.MaxAcceptanceCriteria = 1 }, want: []int{10}},
	{name: "10 locks", mutate: func(c *capsule.Capsule) {
		c.Constraints.ResourceLocksRequired = append(c.Constraints.ResourceLocksRequired, "src/greet/testdata")
	}, config: func(cfg *Config) { cfg.MaxLocks = 1 }, want: []int{10}},
	// Rule 11.
	{name: "11 destructive without gate", mutate: func(c *capsule.Capsule) { c.Constraints.Destructive = true }, want: []int{11}},
	{name: "11 destructive kind without gate", mutate: func(c *capsule.Capsule) { c.Task.Kind = "deploy" },
		config: func(cfg *Config) { cfg.ExecutorKinds = []string{"stub", "deploy"} }, want: []int{11}},
	{name: "11 destructive with gate passes", mutate: func(c *capsule.Capsule) {
		c.Constraints.Destructive = true
		c.Review.OperatorGate = capsule.GateApproved
	}},
	// Rule 13.
	{name: "13 no criteria", mutate: func(c *capsule.Capsule) { c.Spec.AcceptanceCriteria = nil }, want: []int{13}},
	{name: "13 blank criterion", mutate: func(c *capsule.Capsule) {
		c.Spec.AcceptanceCriteria = append(c.Spec.AcceptanceCriteria, " \t")
	}, want: []int{13}},
	{name: "13 duplicate criterion", mutate: func(c *capsule.Capsule) {
		c.Spec.AcceptanceCriteria = append(c.Spec.AcceptanceCriteria, " Greets in ENGLISH ")
	}, want: []int{13}},
	// Rule 14.
	{name: "14 beyond horizon", mutate: func(c *capsule.Capsule) { c.Deadline = c.CreatedAt.Add(8 * 24 * time.Hour) }, want: []int{14}},
	{name: "14 before created", mutate: func(c *capsule.Capsule) { c.Deadline = c.CreatedAt.Add(-time.Hour) }, want: []int{14}},
	{name: "14 exactly the horizon passes", mutate: func(c *capsule.Capsule) { c.Deadline = c.CreatedAt.Add(7 * 24 * time.Hour) }},
	// Rule 18.
	{name: "18 tokens ceiling", config: func(cfg *Config) { cfg.MaxTokens = 10_000 }, want: []int{18}},
	{name: "18 dollars ceiling", config: func(cfg *Config) { cfg.MaxDollars = 1 }, want: []int{18}},
	// Rule 19.
	{name: "19 wave closed", facts: func(f *fakeFacts) { f.wave.Closed = true }, want: []int{19}},
	// A wave without room is no violation: the capsule waits for room at
	// admission (phases.admitToWave), so these pass.
	{name: "19 wave tokens left passes", facts: func(f *fakeFacts) { f.wave.Used.Tokens = 960_000 }},
	{name: "19 wave dollars left passes", facts: func(f *fakeFacts) { f.wave.Used.Dollars = 98 }},
	{name: "19 wave overspent passes", facts: func(f *fakeFacts) { f.wave.Used.Tokens = 2_000_000 }},
	{name: "19 exact fit passes", facts: func(f *fakeFacts) {
		f.wave.Used = capsule.Usage{Tokens: 950_000, Dollars: 97.5}
	}},
	{name: "19 no wave record passes", facts: func(f *fakeFacts) { f.waveOK = false; f.wave.Closed = true }},
	{name: "19 uncapped wave passes", facts: func(f *fakeFacts) {
		f.wave = WaveInfo{Used: capsule.Usage{Tokens: 1 << 40, Dollars: 1e9}}
	}},
	// Rule 20.
	{name: "20 no reviewer", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = "  " }, want: []int{20}},
	{name: "20 reviewer is producer", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = "agent.writer" },
		config: func(cfg *Config) { cfg.ReviewerIDs = []string{"agent.writer"} }, want: []int{20}},
	{name: "20 default reviewer serves an undeclared one", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = "" },
		config: func(cfg *Config) { cfg.DefaultReviewer = testReviewer }},
	{name: "20 declared reviewer wins over the default", config: func(cfg *Config) {
		cfg.DefaultReviewer = "agent.writer"
		cfg.ReviewerIDs = []string{testReviewer, "agent.writer"}
	}},
	{name: "20 default reviewer is the producer", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = " " },
		config: func(cfg *Config) { cfg.DefaultReviewer = "agent.writer"; cfg.ReviewerIDs = []string{"agent.writer"} }, want: []int{20}},
	// Rule 21.
	{name: "21 above 3", mutate: func(c *capsule.Capsule) { c.Review.MaxCycles = 4 }, want: []int{21}},
	{name: "21 below 1", mutate: func(c *capsule.Capsule) { c.Review.MaxCycles = -1 }, want: []int{21}},
	{name: "21 absent passes", mutate: func(c *capsule.Capsule) { c.Review.MaxCycles = 0 }},
	{name: "21 one passes", mutate: func(c *capsule.Capsule) { c.Review.MaxCycles = 1 }},
	// Rule 22.
	{name: "22 no executor", mutate: func(c *capsule.Capsule) { c.Task.Kind = "shell" }, want: []int{22}},
	{name: "22 unknown reviewer", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = "agent.nobody" }, want: []int{22}},
	{name: "22 reviewer ids compared exactly", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = "Agent.Reviewer" }, want: []int{22}},
	{name: "22 stub reviewer by default", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = "stub-reviewer" },
		config: func(cfg *Config) { cfg.ReviewerIDs = nil; *cfg = cfg.WithDefaults() }},
	{name: "22 blank reviewer is rule 20's alone", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = " " }, want: []int{20}},
	{name: "22 unknown default reviewer", mutate: func(c *capsule.Capsule) { c.Review.ReviewerAgentID = "" },
		config: func(cfg *Config) { cfg.DefaultReviewer = "agent.nobody" }, want: []int{22}},
	// Rule 23.
	{name: "23 https context ref", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "https:example.com/spec")
	}, want: []int{23}},
	{name: "23 ref without scheme", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "docs/readme.md")
	}, want: []int{23}},
	{name: "23 s3 target", mutate: func(c *capsule.Capsule) { c.Target = "s3:bucket/key" }, want: []int{23}},
	{name: "23 scheme is case sensitive", mutate: func(c *capsule.Capsule) {
		c.ContextRefs = append(c.ContextRefs, "KV:config/greeting")
	}, want: []int{23}},
	// Rule 24.
	{name: "24 depends on itself in upper case", mutate: func(c *capsule.Capsule) {
		c.DependsOn = []string{strings.ToUpper(testCapsuleID)}
	}, want: []int{24}},
	{name: "24 dependency looked up by canonical id", mutate: func(c *capsule.Capsule) {
		c.DependsOn = []string{strings.ToLower(testDepID)}
	}, facts: func(f *fakeFacts) { f.notDone[strings.ToLower(testDepID)] = true }},
	{name: "24 dependency not done", facts: func(f *fakeFacts) { f.notDone[testDepID] = true }, want: []int{24}},
	{name: "24 depends on itself", mutate: func(c *capsule.Capsule) { c.DependsOn = []string{testCapsuleID} }, want: []int{24}},
	{name: "24 malformed dependency", mutate: func(c *capsule.Capsule) { c.DependsOn = []string{"yesterday"} }, want: []int{24}},
	// Rule 25.
	{name: "25 mode undeclared", mutate: func(c *capsule.Capsule) { c.Constraints.Network = capsule.Network{} }, want: []int{25}},
	{name: "25 no justification", mutate: func(c *capsule.Capsule) {
		c.Constraints.Network = capsule.Network{Mode: "restricted", AllowHosts: []string{"proxy.golang.org"}}
	}, want: []int{25}},
	{name: "25 no hosts", mutate: func(c *capsule.Capsule) {
		c.Constraints.Network = capsule.Network{Mode: "restricted", Justification: "fetch modules"}
	}, want: []int{25}},
	{name: "25 restricted and declared passes", mutate: func(c *capsule.Capsule) {
		c.Constraints.Network = capsule.Network{Mode: "restricted", Justification: "fetch modules",
			AllowHosts: []string{"proxy.golang.org"}}
	}},
	{name: "25 host outside the configured allowed hosts", mutate: func(c *capsule.Capsule) {
		c.Constraints.Network = capsule.Network{Mode: "restricted", Justification: "fetch modules",
			AllowHosts: []string{"proxy.golang.org", "evil.example"}}
	}, config: func(cfg *Config) { cfg.AllowedHosts = []string{"proxy.golang.org"} }, want: []int{25}},
	{name: "25 configured allowed hosts: exact ignoring case and *.domain pass", mutate: func(c *capsule.Capsule) {
		c.Constraints.Network = capsule.Network{Mode: "restricted", Justification: "fetch modules",
			AllowHosts: []string{"Proxy.Golang.org", "a.b.example.com"}}
	}, config: func(cfg *Config) { cfg.AllowedHosts = []string{"proxy.golang.org", "*.example.com"} }},
	{name: "25 *.domain does not match the domain itself", mutate: func(c *capsule.Capsule) {
		c.Constraints.Network = capsule.Network{Mode: "restricted", Justification: "fetch modules",
			AllowHosts: []string{"example.com"}}
	}, config: func(cfg *Config) { cfg.AllowedHosts = []string{"*.example.com"} }, want: []int{25}},
}

func TestEachRuleAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validCapsule()
			if tc.mutate != nil {
				tc.mutate(c)
			}
			var cfg Config
			if tc.config != nil {
				tc.config(&cfg)
			}
			facts := newFacts()
			if tc.facts != nil {
				tc.facts(facts)
			}
			res := Evaluate(t.Context(), input(t, c, cfg, facts))
			require.Equal(t, tc.want, res.Violated, "findings: %+v", res.Findings)
			require.Empty(t, res.NotEvaluated)
			require.Empty(t, res.Errors)
			if tc.want == nil {
				require.Empty(t, res.Findings)
				require.True(t, res.Passed())
				return
			}
			require.NotEmpty(t, res.Findings)
			r, ok := Lookup(tc.want[0])
			require.True(t, ok)
			for _, f := range res.Findings {
				require.Equal(t, r.Number, f.Rule)
				require.Equal(t, r.Title, f.Title)
				require.NotEmpty(t, f.Message)
				if tc.absent != "" {
					require.NotContains(t, f.Message, tc.absent, "finding echoes the secret")
					require.NotContains(t, f.Field, tc.absent, "finding echoes the secret")
				}
			}
		})
	}
}

// Every absolute rule has a case violating it alone and, through the base
// capsule, a passing one (CONSTITUTION.md, last paragraph).
func TestEveryAbsoluteRuleHasAloneCase(t *testing.T) {
	t.Parallel()
	covered := map[int]bool{}
	for _, tc := range ruleCases {
		if len(tc.want) == 1 {
			covered[tc.want[0]] = true
		}
	}
	for _, n := range absoluteNumbers() {
		require.True(t, covered[n], "rule %d has no case violating it alone", n)
	}
}

func TestFindingFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *capsule.Capsule)
		want   []capsule.Finding
	}{
		{
			name:   "scope names target and lock",
			mutate: func(c *capsule.Capsule) { c.Constraints.AllowedPaths = []string{"docs"} },
			want: []capsule.Finding{
				{Rule: 5, Title: "Scope containment", Field: "constraints.resource_locks_required[0]",
					Message: `lock path "src/greet" lies outside constraints.allowed_paths`},
				{Rule: 5, Title: "Scope containment", Field: "target",
					Message: `target path "src/greet/greet.go" lies outside constraints.allowed_paths`},
			},
		},
		{
			name: "path safety quotes control characters",
			mutate: func(c *capsule.Capsule) {
				c.ContextRefs = append(c.ContextRefs, "kv:a\x01")
			},
			want: []capsule.Finding{
				{Rule: 7, Title: "Path safety", Field: "context_refs[3]",
					Message: `context ref is unsafe: path "a\x01": control character`},
			},
		},
		{
			name: "secrets name field and kind only",
			mutate: func(c *capsule.Capsule) {
				c.Metadata = json.RawMessage(`{"db":{"password":"hunter2"},"list":["x","AKIAIOSFODNN7EXAMPLE"]}`)
			},
			want: []capsule.Finding{
				{Rule: 9, Title: "No secrets", Field: "metadata.db.password",
					Message: "holds a credential-named member with a value (value withheld)"},
				{Rule: 9, Title: "No secrets", Field: "metadata.list[1]",
					Message: "holds an AWS access key id (value withheld)"},
			},
		},
		{
			name: "secret member names are redacted in fields",
			mutate: func(c *capsule.Capsule) {
				c.Metadata = json.RawMessage(`{"AKIAIOSFODNN7EXAMPLE":{"x":"-----BEGIN PRIVATE KEY-----"}}`)
			},
			want: []capsule.Finding{
				{Rule: 9, Title: "No secrets", Field: "metadata[<redacted>]",
					Message: "holds a member name that is an AWS access key id (value withheld)"},
				{Rule: 9, Title: "No secrets", Field: "metadata[<redacted>].x",
					Message: "holds a private key block (value withheld)"},
			},
		},
		{
			name: "duplicates point at the first",
			mutate: func(c *capsule.Capsule) {
				c.Spec.AcceptanceCriteria = []string{"a", "b", "A"}
			},
			want: []capsule.Finding{
				{Rule: 13, Title: "Testable acceptance", Field: "spec.acceptance_criteria[2]",
					Message: `acceptance criterion "A" duplicates spec.acceptance_criteria[0]`},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validCapsule()
			tc.mutate(c)
			res := Evaluate(t.Context(), input(t, c, Config{}, newFacts()))
			require.Equal(t, tc.want, res.Findings)
		})
	}
}

func TestSeveralRulesViolated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		mutate   func(c *capsule.Capsule)
		want     []int
		wantHalt string
	}{
		{
			name: "5 7 9",
			mutate: func(c *capsule.Capsule) {
				c.Constraints.AllowedPaths = []string{"docs"}
				c.ContextRefs = append(c.ContextRefs, "file:../outside")
				c.Task.Description = "log in with password=hunter2"
			},
			want:     []int{5, 7, 9},
			wantHalt: "absolute_rules_violated:[5, 7, 9]",
		},
		{
			name: "many",
			mutate: func(c *capsule.Capsule) {
				c.SchemaVersion = "9.0"
				c.ProducerAgentID = "agent.reviewer"
				c.Spec.AcceptanceCriteria = nil
				c.Task.Kind = "shell"
				c.Review.MaxCycles = 5
				c.Constraints.Network.Mode = ""
				c.Budget.Tokens = 20_000_000
			},
			// 18: the budget breaks the ceiling (a wave without room for
			// it is no violation: the capsule would wait).
			want:     []int{1, 13, 18, 20, 21, 22, 25},
			wantHalt: "absolute_rules_violated:[1, 13, 18, 20, 21, 22, 25]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validCapsule()
			tc.mutate(c)
			res := Evaluate(t.Context(), input(t, c, Config{}, newFacts()))
			require.Equal(t, tc.want, res.Violated)
			require.Equal(t, tc.wantHalt, res.Halt().String())
			require.Equal(t, capsule.CodeAbsoluteRulesViolated, res.Halt().Code)
			require.False(t, res.Passed())

			var rulesSeen []int
			for _, f := range res.Findings {
				rulesSeen = append(rulesSeen, f.Rule)
			}
			require.True(t, slices.IsSorted(rulesSeen), "findings sorted by rule")
			require.Equal(t, tc.want, slices.Compact(rulesSeen), "every violated rule has a finding")
		})
	}
}

func TestOfflineEvaluation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		mutate           func(c *capsule.Capsule)
		wantNotEvaluated []int
		wantViolated     []int
	}{
		{name: "wave and deps set", wantNotEvaluated: []int{2, 19, 24}},
		{name: "no wave no deps", mutate: func(c *capsule.Capsule) {
			c.WaveID = ""
			c.DependsOn = nil
		}, wantNotEvaluated: []int{2}},
		{name: "static part of 2 still runs", mutate: func(c *capsule.Capsule) {
			c.CapsuleID = "nope"
		}, wantNotEvaluated: []int{19, 24}, wantViolated: []int{2}},
		{name: "static part of 24 still runs", mutate: func(c *capsule.Capsule) {
			c.DependsOn = []string{testDepID, testCapsuleID}
		}, wantNotEvaluated: []int{2, 19}, wantViolated: []int{24}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validCapsule()
			if tc.mutate != nil {
				tc.mutate(c)
			}
			res := Evaluate(t.Context(), input(t, c, Config{}, nil))
			require.Equal(t, tc.wantNotEvaluated, res.NotEvaluated)
			require.Equal(t, tc.wantViolated, res.Violated)
			require.Empty(t, res.Errors, "skipping the live part is not an error")
			require.False(t, res.Passed())
		})
	}
}

func TestFactErrorsAreNotPasses(t *testing.T) {
	t.Parallel()
	errKV := errors.New("kv unavailable")
	tests := []struct {
		name  string
		facts func(f *fakeFacts)
		want  []int
	}{
		{name: "id lookup", facts: func(f *fakeFacts) { f.conflictErr = errKV }, want: []int{2}},
		{name: "wave lookup", facts: func(f *fakeFacts) { f.waveErr = errKV }, want: []int{19}},
		{name: "dependency lookup", facts: func(f *fakeFacts) { f.depErr = errKV }, want: []int{24}},
		{name: "all lookups", facts: func(f *fakeFacts) {
			f.conflictErr, f.waveErr, f.depErr = errKV, errKV, errKV
		}, want: []int{2, 19, 24}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			facts := newFacts()
			tc.facts(facts)
			res := Evaluate(t.Context(), input(t, validCapsule(), Config{}, facts))
			require.Empty(t, res.Violated)
			require.Equal(t, tc.want, res.NotEvaluated)
			require.Len(t, res.Errors, len(tc.want))
			for _, n := range tc.want {
				require.ErrorIs(t, res.Errors[n], errKV)
			}
			require.ErrorIs(t, res.Err(), errKV)
			require.Contains(t, res.Err().Error(), "rule "+strconv.Itoa(tc.want[0])+": ")
			require.False(t, res.Passed())
			require.True(t, res.Halt().IsZero(), "an error is not a violation")
		})
	}
}

// A finding wins over a failed lookup: the rule is violated, not skipped.
func TestFindingAndErrorInOneRule(t *testing.T) {
	t.Parallel()
	c := validCapsule()
	c.DependsOn = []string{testDepID, testCapsuleID}
	facts := newFacts()
	facts.depErr = errors.New("kv unavailable")
	res := Evaluate(t.Context(), input(t, c, Config{}, facts))
	require.Equal(t, []int{24}, res.Violated)
	require.Empty(t, res.NotEvaluated)
	require.Contains(t, res.Errors, 24)
}

func TestEvaluateFromRawOnly(t *testing.T) {
	t.Parallel()
	in := input(t, validCapsule(), Config{}, newFacts())
	in.Capsule = nil
	res := Evaluate(t.Context(), in)
	require.True(t, res.Passed(), "%+v", res)

	res = Evaluate(t.Context(), Input{Raw: []byte("not json")})
	require.Empty(t, res.Violated)
	require.Equal(t, absoluteNumbers(), res.NotEvaluated)
	for _, n := range absoluteNumbers() {
		require.ErrorIs(t, res.Errors[n], ErrNoCapsule)
	}
}

func TestRuleRun(t *testing.T) {
	t.Parallel()
	c := validCapsule()
	c.Target = "file:src/other.go"
	r, ok := Lookup(8)
	require.True(t, ok)
	fs, err := r.Run(t.Context(), Input{Capsule: c})
	require.NoError(t, err)
	require.Equal(t, []capsule.Finding{{Rule: 8, Title: "Write-lock coverage", Field: "target",
		Message: `target path "src/other.go" is not covered by any constraints.resource_locks_required entry`}}, fs)

	r, ok = Lookup(24)
	require.True(t, ok)
	_, err = r.Run(t.Context(), Input{Capsule: validCapsule()})
	require.ErrorIs(t, err, ErrNoFacts)

	r, ok = Lookup(12)
	require.True(t, ok)
	fs, err = r.Run(t.Context(), Input{Capsule: c})
	require.NoError(t, err)
	require.Empty(t, fs, "structural rules have no check")
}

func TestConstitutionTable(t *testing.T) {
	t.Parallel()
	require.Len(t, Constitution, 26)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 18, 19, 20, 21, 22, 23, 24, 25}, absoluteNumbers())
	var structural []int
	for i, r := range Constitution {
		if i > 0 {
			require.Greater(t, r.Number, Constitution[i-1].Number, "numbers unique and ascending")
		}
		require.NotEmpty(t, r.Title, "rule %d", r.Number)
		switch r.Kind {
		case Absolute:
			require.NotNil(t, r.Check, "rule %d", r.Number)
			require.Empty(t, r.EnforcedAt, "rule %d", r.Number)
		case Structural:
			structural = append(structural, r.Number)
			require.Nil(t, r.Check, "rule %d", r.Number)
			require.NotEmpty(t, r.EnforcedAt, "rule %d", r.Number)
		default:
			t.Fatalf("rule %d: unknown kind %q", r.Number, r.Kind)
		}
		if r.Params != nil {
			require.NotEmpty(t, r.Params(Config{}), "rule %d", r.Number)
		}
		got, ok := Lookup(r.Number)
		require.True(t, ok)
		require.Equal(t, r.Number, got.Number)
	}
	require.Equal(t, []int{12, 15, 16, 17, 35}, structural)
	for _, n := range []int{2, 19, 24} {
		r, _ := Lookup(n)
		require.True(t, r.NeedsFacts, "rule %d", n)
	}
	_, ok := Lookup(26)
	require.False(t, ok)
	require.Equal(t, "2026.11.3", Version)
}

func TestParams(t *testing.T) {
	t.Parallel()
	param := func(n int, cfg Config) map[string]any {
		r, ok := Lookup(n)
		require.True(t, ok)
		require.NotNil(t, r.Params, "rule %d", n)
		return r.Params(cfg)
	}
	require.Equal(t, map[string]any{"horizon": "168h0m0s"}, param(14, Config{}))
	require.Equal(t, map[string]any{"horizon": "24h0m0s"}, param(14, Config{Horizon: 24 * time.Hour}))
	require.Equal(t, map[string]any{"max_tokens": int64(10_000_000), "max_dollars": float64(1000)}, param(18, Config{}))
	require.Equal(t, map[string]any{"max_cycles": 3}, param(12, Config{}))
	require.Equal(t, map[string]any{"allowed_schemes": []string{"artifact", "file", "kv"}}, param(23, Config{}))
	require.Equal(t, map[string]any{"deny_paths": []string{".git", ".env", "secrets"}}, param(6, Config{}))
	require.Equal(t, map[string]any{"patterns": []string{
		"private_key_block", "aws_access_key_id", "bearer_token", "aws_secret_access_key",
		"credential_assignment", "url_password", "github_token", "slack_token", "credential_member",
	}}, param(9, Config{}))
	require.Equal(t, 131072, param(10, Config{})["max_capsule_bytes"])
	require.Equal(t, map[string]any{"executor_kinds": []string{"stub"}, "reviewer_ids": []string{"stub-reviewer"}}, param(22, Config{}))
	require.Equal(t, map[string]any{"default_reviewer": ""}, param(20, Config{}))
	require.Equal(t, map[string]any{"default_reviewer": "stub-reviewer"}, param(20, Config{DefaultReviewer: "stub-reviewer"}))
	require.Equal(t, map[string]any{"allowed_hosts": []string{}}, param(25, Config{}), "[] rather than null")
	require.Equal(t, map[string]any{"allowed_hosts": []string{"*.example.com"}}, param(25, Config{AllowedHosts: []string{"*.example.com"}}))
	require.Equal(t, []string{}, param(3, Config{})["agent_registry"])
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg := Config{}.WithDefaults()
	require.Equal(t, Config{
		SupportedMajors:       []int{1},
		DenyPaths:             []string{".git", ".env", "secrets"},
		MaxCapsuleBytes:       131072,
		MaxContextRefs:        64,
		MaxAcceptanceCriteria: 64,
		MaxLocks:              32,
		DestructiveKinds:      []string{"delete", "migrate", "deploy"},
		Horizon:               7 * 24 * time.Hour,
		MaxTokens:             10_000_000,
		MaxDollars:            1000,
		AllowedSchemes:        []string{"artifact", "file", "kv"},
		ExecutorKinds:         []string{"stub"},
		ReviewerIDs:           []string{"stub-reviewer"},
	}, cfg)
	require.NoError(t, cfg.Validate())
	require.Equal(t, cfg, cfg.WithDefaults(), "idempotent")

	// The result shares no memory with the package defaults.
	cfg.DenyPaths[0] = "changed"
	require.Equal(t, ".git", Config{}.WithDefaults().DenyPaths[0])

	// Non-nil empty lists mean "none" and survive.
	cfg = Config{DenyPaths: []string{}, DestructiveKinds: []string{}}.WithDefaults()
	require.Empty(t, cfg.DenyPaths)
	require.NotNil(t, cfg.DenyPaths)
	require.Empty(t, cfg.DestructiveKinds)
	require.NoError(t, cfg.Validate())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string
	}{
		{"no majors", func(c *Config) { c.SupportedMajors = []int{} }, "supported_majors"},
		{"bad registry id", func(c *Config) { c.AgentRegistry = []string{"bad id"} }, "agent_registry[0]"},
		{"unsafe deny path", func(c *Config) { c.DenyPaths = []string{"../x"} }, "deny_paths[0]"},
		{"negative size", func(c *Config) { c.MaxCapsuleBytes = -1 }, "max_capsule_bytes"},
		{"negative horizon", func(c *Config) { c.Horizon = -time.Hour }, "horizon"},
		{"negative tokens", func(c *Config) { c.MaxTokens = -1 }, "max_tokens"},
		{"negative dollars", func(c *Config) { c.MaxDollars = -1 }, "max_dollars"},
		{"bad scheme", func(c *Config) { c.AllowedSchemes = []string{"1x"} }, "allowed_schemes[0]"},
		{"no executors", func(c *Config) { c.ExecutorKinds = []string{} }, "executor_kinds"},
		{"no reviewers", func(c *Config) { c.ReviewerIDs = []string{} }, "reviewer_ids"},
		{"rule 10 above reception's limit", func(c *Config) { c.MaxLocks = capsule.MaxResourceLocks + 1 }, "max_locks: 257 is above RECEPTION's hard limit of 256"},
		{"blank reviewer", func(c *Config) { c.ReviewerIDs = []string{" "} }, "reviewer_ids[0]: blank"},
		{"blank destructive kind", func(c *Config) { c.DestructiveKinds = []string{" "} }, "destructive_kinds[0]"},
		{"unknown default reviewer", func(c *Config) { c.DefaultReviewer = "agent.nobody" }, `default_reviewer: "agent.nobody" is not a configured reviewer (stub-reviewer)`},
		{"bad allowed host", func(c *Config) { c.AllowedHosts = []string{"https://x.example"} }, "allowed_hosts[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{}
			tc.modify(&cfg)
			err := cfg.WithDefaults().Validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestValidCapsuleID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		testCapsuleID:                          true,
		strings.ToUpper(testCapsuleID):         true,
		testDepID:                              true,
		strings.ToLower(testDepID):             true,
		"81HZY8J6Q4W3V0D7T1N9K2M5PC":           false, // overflows 128 bits
		"01HZY8J6Q4W3V0D7T1N9K2M5P":            false,
		"0f8fad5bd9cb469fa16570867728950e":     false,
		"0f8fad5b-d9cb-469f-a165-70867728950g": false,
		"":                                     false,
	} {
		require.Equal(t, want, ValidCapsuleID(id), id)
	}
}

func TestCompareFields(t *testing.T) {
	t.Parallel()
	fields := []string{"context_refs[10]", "target", "context_refs[2]", "", "context_refs[02]", "budget.tokens"}
	slices.SortStableFunc(fields, compareFields)
	require.Equal(t, []string{"", "budget.tokens", "context_refs[2]", "context_refs[02]", "context_refs[10]", "target"}, fields)
}

// An explicit "max_cycles": 0 is below 1 (Rule 21), though it decodes like
// an absent member; the raw bytes tell them apart however they are spelt.
func TestCycleLimitExplicitZero(t *testing.T) {
	t.Parallel()
	c0 := validCapsule()
	c0.Review.MaxCycles = 0
	raw, err := json.Marshal(c0)
	require.NoError(t, err)
	base := string(raw)
	require.Contains(t, base, `"review":{"reviewer_agent_id":"agent.reviewer"`)
	withReview := func(members string) string {
		return strings.Replace(base, `"review":{`, `"review":{`+members+`,`, 1)
	}
	tests := []struct {
		name     string
		raw      string
		violated bool
	}{
		{"absent", base, false},
		{"explicit zero", withReview(`"max_cycles":0`), true},
		{"escaped member name", withReview(`"max\u005fcycles":0`), true},
		{"last duplicate wins like the decoder", withReview(`"max_cycles":2,"max_cycles":0`), true},
		{"zero overridden by a later member", withReview(`"max_cycles":0,"max_cycles":2`), false},
		{"max_cycles elsewhere is not the member", strings.Replace(base, `{"team":"platform"}`, `{"max_cycles":0}`, 1), false},
		{"explicit two", withReview(`"max_cycles":2`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := new(capsule.Capsule)
			require.NoError(t, json.Unmarshal([]byte(tt.raw), c))
			fs, err := checkCycleLimit(t.Context(), Input{Capsule: c, Raw: []byte(tt.raw)})
			require.NoError(t, err)
			if !tt.violated {
				require.Empty(t, fs)
				return
			}
			require.Equal(t, []capsule.Finding{{Field: "review.max_cycles", Message: "review.max_cycles 0 is outside 1..3"}}, fs)
		})
	}
}

// Ten thousand bad entries give a few findings and a count, per rule and in
// all, so the halt's findings fit in a checkpoint.
func TestFindingsAreCapped(t *testing.T) {
	t.Parallel()
	c := validCapsule()
	c.Spec.AcceptanceCriteria = make([]string, 10_000) // every one blank: Rule 13
	for i := range 5000 {
		c.ContextRefs = append(c.ContextRefs, fmt.Sprintf("file:../x%d", i)) // Rules 7 and 10
	}
	res := Evaluate(t.Context(), input(t, c, Config{}, newFacts()))
	require.Equal(t, []int{7, 10, 13}, res.Violated)
	per := map[int][]capsule.Finding{}
	for _, f := range res.Findings {
		per[f.Rule] = append(per[f.Rule], f)
	}
	require.Len(t, per[13], MaxFindingsPerRule)
	require.Equal(t, capsule.Finding{Rule: 13, Title: "Testable acceptance", Message: "… and 9,991 more findings"}, per[13][MaxFindingsPerRule-1])
	require.Equal(t, "spec.acceptance_criteria[0]", per[13][0].Field, "the first ones are kept, in order")
	require.Equal(t, "spec.acceptance_criteria[8]", per[13][8].Field)
	require.Len(t, per[7], MaxFindingsPerRule)
	require.Equal(t, "… and 4,991 more findings", per[7][MaxFindingsPerRule-1].Message)
	require.LessOrEqual(t, len(res.Findings), capsule.MaxFindings)

	// Rule.Run caps the same way.
	fs, err := Constitution[slices.IndexFunc(Constitution, func(r Rule) bool { return r.Number == 13 })].Run(t.Context(), input(t, c, Config{}, nil))
	require.NoError(t, err)
	require.Equal(t, per[13], fs)
}

// TestConfigJSON: the config file's "constitution" object reads every
// parameter, refuses unknown members and bad horizons, and writes what it
// reads (null stays the default, [] stays "none").
func TestConfigJSON(t *testing.T) {
	t.Parallel()
	var cfg Config
	require.NoError(t, json.Unmarshal([]byte(`{
		"supported_majors": [1, 2], "agent_registry": ["agent.writer"], "deny_paths": ["infra"],
		"max_capsule_bytes": 4096, "max_context_refs": 8, "max_acceptance_criteria": 9, "max_locks": 10,
		"destructive_kinds": [], "horizon": "72h", "max_tokens": 5000, "max_dollars": 2.5,
		"allowed_schemes": ["file"], "allowed_hosts": ["*.example.com"]}`), &cfg))
	want := Config{
		SupportedMajors: []int{1, 2}, AgentRegistry: []string{"agent.writer"}, DenyPaths: []string{"infra"},
		MaxCapsuleBytes: 4096, MaxContextRefs: 8, MaxAcceptanceCriteria: 9, MaxLocks: 10,
		DestructiveKinds: []string{}, Horizon: 72 * time.Hour, MaxTokens: 5000, MaxDollars: 2.5,
		AllowedSchemes: []string{"file"}, AllowedHosts: []string{"*.example.com"},
	}
	require.Equal(t, want, cfg)
	require.NoError(t, cfg.WithDefaults().Validate())

	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	var back Config
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, cfg, back)

	b, err = json.Marshal(Config{})
	require.NoError(t, err)
	back = Config{}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, Config{}, back, "absent stays default: %s", b)

	for doc, msg := range map[string]string{
		`{"deny_path": ["x"]}`:      `unknown field "deny_path"`,
		`{"horizon": "a week"}`:     "horizon",
		`{"horizon": 3600}`:         "horizon",
		`{"max_tokens": "many"}`:    "max_tokens",
		`{"executor_kinds": ["x"]}`: `unknown field "executor_kinds"`,
	} {
		require.ErrorContains(t, json.Unmarshal([]byte(doc), &back), msg, doc)
	}
}

// TestVersionOfFoldsInParameters: the version in force is the constant and
// a digest of the parameters; equal configurations (defaults spelled out or
// not) agree, and a changed parameter changes it.
func TestVersionOfFoldsInParameters(t *testing.T) {
	t.Parallel()
	def := VersionOf(Config{})
	require.Regexp(t, `^`+regexp.QuoteMeta(Version)+`\+[0-9a-f]{8}$`, def)
	require.Equal(t, def, VersionOf(Config{}.WithDefaults()), "defaults spelled out are the same parameters")
	require.Equal(t, def, InForce(Config{}).Version)
	deny := VersionOf(Config{DenyPaths: []string{".git", "infra"}})
	require.NotEqual(t, def, deny)
	require.Equal(t, deny, VersionOf(Config{DenyPaths: []string{".git", "infra"}}), "deterministic")
	require.NotEqual(t, def, VersionOf(Config{MaxTokens: 5000}))
	require.Equal(t, deny, VersionOf(Config{DenyPaths: []string{"infra", ".git"}}), "a list is a set: its order does not count")
}
