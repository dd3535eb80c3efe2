package executors

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/plainjson"
)

// Built-in stub names.
const (
	StubKind       = "stub"
	StubReviewerID = "stub-reviewer"
)

// DefaultStubUsage is what the stub executor reports when metadata.stub.usage is absent.
var DefaultStubUsage = capsule.Usage{Tokens: 1000, Dollars: 0.01}

// StubScript is the metadata.stub object of a capsule.
type StubScript struct {
	Reviews []capsule.Verdict `json:"reviews"`
	// Rounds script a composition's verification loop: in round r
	// (chain.round, from 1) the reviews are Rounds[r-1] when there is one.
	Rounds      [][]capsule.Verdict `json:"rounds"`
	Usage       *capsule.Usage      `json:"usage"`
	ReviewUsage *capsule.Usage      `json:"review_usage"`
	Fail        json.RawMessage     `json:"fail"`
}

// ParseStubScript reads metadata.stub; a capsule without one gets the zero script.
func ParseStubScript(c *capsule.Capsule) (StubScript, error) {
	var meta struct {
		Stub StubScript `json:"stub"`
	}
	if len(c.Metadata) == 0 {
		return StubScript{}, nil
	}
	if err := json.Unmarshal(c.Metadata, &meta); err != nil {
		return StubScript{}, fmt.Errorf("metadata.stub: %w", err)
	}
	// The script is the capsule's, so untrusted: usage it would report is
	// held to the rule every executor's is.
	if u := meta.Stub.Usage; u != nil {
		if err := u.Validate(); err != nil {
			return StubScript{}, fmt.Errorf("metadata.stub.usage: %w", err)
		}
	}
	if u := meta.Stub.ReviewUsage; u != nil {
		if err := u.Validate(); err != nil {
			return StubScript{}, fmt.Errorf("metadata.stub.review_usage: %w", err)
		}
	}
	for i, v := range meta.Stub.Reviews {
		if !v.Valid() {
			return StubScript{}, fmt.Errorf("metadata.stub.reviews[%d]: unknown verdict %q", i, v)
		}
	}
	for r, round := range meta.Stub.Rounds {
		for i, v := range round {
			if !v.Valid() {
				return StubScript{}, fmt.Errorf("metadata.stub.rounds[%d][%d]: unknown verdict %q", r, i, v)
			}
		}
	}
	return meta.Stub, nil
}

// failure returns the scripted failure message, or "" when the stub succeeds.
func (s StubScript) failure() string {
	raw := strings.TrimSpace(string(s.Fail))
	switch raw {
	case "", "null", "false":
		return ""
	case "true":
		return "stub failure requested"
	}
	var msg string
	if json.Unmarshal(s.Fail, &msg) == nil && msg != "" {
		return msg
	}
	return "stub failure requested"
}

// stubScripts remembers the scripts the stub read: a capsule's metadata was
// decoded by reflection at every call, once in EXECUTION and once in each
// REVIEW cycle, and capsules made from one template share their metadata.
var stubScripts = stubCache{scripts: make(map[string]stubParsed)}

// Bounds of the scripts remembered: metadata is the capsule's, of any
// size and variety, so only short metadata is kept, and the whole set is
// dropped when full (a refill costs only the decoding it saved).
const (
	stubCacheEntries = 256
	stubCacheMaxLen  = 1 << 10
)

// stubCache maps metadata bytes to the script and failure message read
// from them. A script's slices are shared by every capsule with the same
// metadata: Execute and Review only read them.
type stubCache struct {
	mu      sync.Mutex
	scripts map[string]stubParsed
}

type stubParsed struct {
	script  StubScript
	failure string
}

// parse is ParseStubScript and the script's failure message, remembered
// for metadata read before (TestStubCacheAsParse); a metadata refused is
// not remembered, and refused again with the same error.
func (c *stubCache) parse(cp *capsule.Capsule) (StubScript, string, error) {
	if len(cp.Metadata) == 0 {
		return StubScript{}, "", nil
	}
	c.mu.Lock()
	p, ok := c.scripts[string(cp.Metadata)]
	c.mu.Unlock()
	if ok {
		return p.script, p.failure, nil
	}
	script, err := ParseStubScript(cp)
	if err != nil {
		return StubScript{}, "", err
	}
	p = stubParsed{script: script, failure: script.failure()}
	if len(cp.Metadata) <= stubCacheMaxLen {
		c.mu.Lock()
		if len(c.scripts) >= stubCacheEntries {
			clear(c.scripts)
		}
		c.scripts[string(cp.Metadata)] = p
		c.mu.Unlock()
	}
	return p.script, p.failure, nil
}

// Stub is the deterministic built-in executor.
type Stub struct{}

// Execute returns a small JSON artifact, or fails when the script says so.
func (Stub) Execute(_ context.Context, req Request) (Result, error) {
	script, failure, err := stubScripts.parse(req.Capsule)
	if err != nil {
		return Result{}, &FailedError{Detail: err.Error()}
	}
	usage := DefaultStubUsage
	if script.Usage != nil {
		usage = *script.Usage
	}
	if msg := failure; msg != "" {
		return Result{}, &FailedError{Detail: msg, Usage: usage}
	}
	content, err := stubContent(req.Capsule.Task.Title, req.Capsule.Target, req.IdempotencyKey, req.Cycle)
	if err != nil {
		return Result{}, err
	}
	return Result{Content: content, MediaType: "application/json", Usage: usage}, nil
}

// stubContent is the stub's artifact: json.Marshal of a map of four
// members, whose keys it writes sorted. Every call built the map and
// encoded it through reflection; where the strings are ones JSON writes as
// they are, it is written directly (TestStubContentAsMarshal,
// FuzzStubContent), else the map is encoded as before.
func stubContent(title, target, key string, cycle int) ([]byte, error) {
	if !plainjson.Plain(title) || !plainjson.Plain(target) || !plainjson.Plain(key) {
		return json.Marshal(map[string]any{
			"summary":         "stub artifact for " + title,
			"cycle":           cycle,
			"target":          target,
			"idempotency_key": key,
		})
	}
	b := make([]byte, 0, 96+len(title)+len(target)+len(key))
	b = strconv.AppendInt(append(b, `{"cycle":`...), int64(cycle), 10)
	b = append(append(append(b, `,"idempotency_key":"`...), key...), `","summary":"stub artifact for `...)
	b = append(append(append(b, title...), `","target":"`...), target...)
	return append(b, `"}`...), nil
}

// StubReviewer is the deterministic built-in reviewer: cycle n gets
// metadata.stub.reviews[n-1], APPROVED when the list is shorter; in round
// r of a composition's verification loop, the list is
// metadata.stub.rounds[r-1] when there is one.
type StubReviewer struct{}

// Review returns the scripted verdict for the cycle.
func (StubReviewer) Review(_ context.Context, req ReviewRequest) (ReviewResult, error) {
	script, _, err := stubScripts.parse(req.Capsule)
	if err != nil {
		return ReviewResult{}, &FailedError{Detail: err.Error()}
	}
	reviews := script.Reviews
	if c := req.Capsule.Chain; c != nil {
		if r := max(c.Round, 1) - 1; r < len(script.Rounds) {
			reviews = script.Rounds[r]
		}
	}
	verdict := capsule.Approved
	if i := req.Cycle - 1; i >= 0 && i < len(reviews) {
		verdict = reviews[i]
	}
	var usage capsule.Usage
	if script.ReviewUsage != nil {
		usage = *script.ReviewUsage
	}
	res := ReviewResult{Verdict: verdict, Usage: usage}
	if verdict != capsule.Approved {
		res.Findings = []capsule.Finding{{Message: fmt.Sprintf("stub reviewer: %s on cycle %d", verdict, req.Cycle)}}
	}
	return res, nil
}
