package bench

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Class is what a generated capsule is scripted to do under the stub
// executor and reviewer, and so which outcome the benchmark expects of it.
type Class int

// Capsule classes of a mix.
const (
	// Valid completes in one cycle: seven transitions.
	Valid Class = iota
	// Review gets CHANGES_REQUESTED on cycle 1 and APPROVED on cycle 2
	// (metadata.stub.reviews): nine transitions.
	Review
	// ExecFail halts in EXECUTION (metadata.stub.fail): executor_failed.
	ExecFail
	// Unapproved halts in PLANNING: spec_not_approved:[approved].
	Unapproved
	numClasses
)

var classNames = [numClasses]string{"valid", "review_2_cycles", "executor_failed", "spec_not_approved"}

func (c Class) String() string {
	if c < 0 || c >= numClasses {
		return "class(" + strconv.Itoa(int(c)) + ")"
	}
	return classNames[c]
}

// Expected is the outcome a class must end in.
type Expected struct {
	State capsule.State
	// Cycle is the Saga-Cycle of the outcome message.
	Cycle int
	// Halt is the exact halt reason; empty for completed capsules.
	Halt string
	// Transitions is the length of the checkpoint history.
	Transitions int
}

// stubFailure is the scripted executor failure of ExecFail capsules.
const stubFailure = "bench: scripted executor failure"

// Expect returns what class c must end in.
func (c Class) Expect() Expected {
	switch c {
	case Review:
		return Expected{State: capsule.Completed, Cycle: 2, Transitions: 9}
	case ExecFail:
		return Expected{State: capsule.Halted, Cycle: 1, Halt: capsule.ExecutorFailed(stubFailure).String(), Transitions: 5}
	case Unapproved:
		return Expected{State: capsule.Halted, Cycle: 0, Halt: capsule.SpecNotApproved([]string{"approved"}).String(), Transitions: 3}
	default:
		return Expected{State: capsule.Completed, Cycle: 1, Transitions: 7}
	}
}

// Mixes the benchmark knows.
const (
	// MixValid is every capsule Valid.
	MixValid = "valid"
	// MixMixed is 80 % Valid, 10 % Review, 5 % ExecFail, 5 % Unapproved,
	// interleaved deterministically (by sequence number modulo 20).
	MixMixed = "mix"
)

// classOf is the class of capsule number seq under mix.
func classOf(mix string, seq uint64) Class {
	if mix != MixMixed {
		return Valid
	}
	switch seq % 20 {
	case 3, 13:
		return Review
	case 7:
		return ExecFail
	case 17:
		return Unapproved
	}
	return Valid
}

// TargetsBucket and TargetKey hold the key every generated capsule targets:
// a kv: target needs no file lock (Rule 8 covers file: targets only), so
// capsules do not serialise on a shared lock.
const (
	TargetsBucket = "BENCH_TARGETS"
	TargetKey     = "t"
)

// Generator builds sealed capsules whose ids encode a run prefix and a
// sequence number, so an outcome maps back to its capsule without a table.
// It is safe for concurrent use.
//
// Sealing with [capsule.Seal] costs about as much CPU as a hop of the
// baseline relay, and the driver shares the machine with what it measures,
// so [Generator.Sealed] fills a per-class template of the capsule's
// canonical (RFC 8785) form instead: the id and the three timestamps are
// the only fields that vary, and they have fixed lengths. The bytes are
// what capsule.Seal would digest, in compact canonical form; the tests check
// them against [Generator.Capsule].
type Generator struct {
	prefix    string // "xxxxxxxx-xxxx-4xxx-8xxx-"
	mix       string
	templates [numClasses]template
}

// template is a class's sealed canonical form with placeholders; digest is
// the same without the integrity member (what the digest covers).
type template struct {
	sealed, digest []byte
}

// Placeholders of a template. Each is as long as what replaces it and
// occurs nowhere else in a capsule.
var (
	holdID       = []byte("00000000-0000-4000-8000-0000deadbeef")
	holdCreated  = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	holdApproved = holdCreated.Add(-time.Minute)
	holdDeadline = holdCreated.Add(time.Hour)
	holdDigest   = bytes.Repeat([]byte("d1"), 32)
)

// NewGenerator returns a generator with a random run prefix.
func NewGenerator(mix string) *Generator {
	var b [8]byte
	_, _ = rand.Read(b[:])
	n := binary.BigEndian.Uint64(b[:])
	// UUID version 4, variant 10xx: 8-4-4-4-12 hex digits; the last 12 hold
	// the sequence number.
	prefix := fmt.Sprintf("%08x-%04x-4%03x-8%03x-", uint32(n>>32), uint16(n>>16), uint16(n)&0xfff, (n>>44)&0xfff)
	g := &Generator{prefix: prefix, mix: mix}
	for c := range numClasses {
		g.templates[c] = newTemplate(c)
	}
	return g
}

// newTemplate canonicalises a capsule of class c built around the
// placeholders.
func newTemplate(c Class) template {
	v := build(string(holdID), c, holdCreated)
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // a fixed value of our own type always marshals
	}
	var t template
	v.Integrity.SHA256 = string(holdDigest)
	if t.digest, err = capsule.Canonicalize(withoutIntegrity(raw)); err != nil {
		panic(err)
	}
	if raw, err = json.Marshal(v); err != nil {
		panic(err)
	}
	if t.sealed, err = capsule.Canonicalize(raw); err != nil {
		panic(err)
	}
	return t
}

// withoutIntegrity drops the top-level integrity member of a marshalled
// capsule, which the digest does not cover.
func withoutIntegrity(raw []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(err)
	}
	delete(m, "integrity")
	out, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return out
}

// ID returns the capsule id of sequence number seq.
func (g *Generator) ID(seq uint64) string { return g.prefix + fmt.Sprintf("%012x", seq) }

// Seq parses an id of this generator back to its sequence number.
func (g *Generator) Seq(id string) (uint64, bool) {
	if len(id) != len(g.prefix)+12 || id[:len(g.prefix)] != g.prefix {
		return 0, false
	}
	n, err := strconv.ParseUint(id[len(g.prefix):], 16, 64)
	return n, err == nil
}

// Class returns the class of sequence number seq.
func (g *Generator) Class(seq uint64) Class { return classOf(g.mix, seq) }

// Capsule returns capsule seq as a typed value, created now: what
// [Generator.Sealed] encodes, without the digest.
func (g *Generator) Capsule(seq uint64, now time.Time) *capsule.Capsule {
	return build(g.ID(seq), g.Class(seq), now)
}

// build is a capsule of class cls with id, created at now.
func build(id string, cls Class, now time.Time) *capsule.Capsule {
	now = now.UTC().Truncate(time.Second)
	approvedAt := now.Add(-time.Minute)
	c := &capsule.Capsule{
		SchemaVersion:   "1.0",
		CapsuleID:       id,
		CreatedAt:       now,
		Deadline:        now.Add(time.Hour),
		ProducerAgentID: "agent-coder-1",
		Task:            capsule.Task{Kind: "stub", Title: "Benchmark capsule", Description: "Update the benchmark target key."},
		Spec: capsule.Spec{
			Approved:           true,
			ApprovedBy:         "human-lead",
			ApprovedAt:         &approvedAt,
			AcceptanceCriteria: []string{"the target key holds the new value"},
			ProblemStatement:   "The benchmark needs work to do.",
			DefinitionOfDone:   "The reviewer approves.",
		},
		ContextRefs: []string{"file:go.mod"},
		Target:      "kv:" + TargetsBucket + "/" + TargetKey,
		Constraints: capsule.Constraints{
			// One lock of its own per capsule: Rule 17 runs for real (checked
			// at RECEPTION, taken and released in EXECUTION) without contention.
			ResourceLocksRequired: []string{"bench/" + id},
			AllowedPaths:          []string{"."},
			Network:               capsule.Network{Mode: "none"},
		},
		Budget: capsule.Budget{Tokens: 10000, Dollars: 5},
		Review: capsule.ReviewPolicy{ReviewerAgentID: "stub-reviewer", MaxCycles: 3},
	}
	switch cls {
	case Review:
		c.Metadata = json.RawMessage(`{"stub":{"reviews":["CHANGES_REQUESTED","APPROVED"]}}`)
	case ExecFail:
		c.Metadata = json.RawMessage(`{"stub":{"fail":"` + stubFailure + `"}}`)
	case Unapproved:
		c.Spec.Approved = false
	}
	return c
}

// Sealed returns capsule seq, created now, as the bytes a producer
// publishes: canonical JSON with integrity.sha256 filled in.
func (g *Generator) Sealed(seq uint64, now time.Time) []byte {
	t := &g.templates[g.Class(seq)]
	now = now.UTC().Truncate(time.Second)
	fill := func(b []byte) []byte {
		b = bytes.ReplaceAll(b, holdID, []byte(g.ID(seq)))
		b = replaceTime(b, holdCreated, now)
		b = replaceTime(b, holdApproved, now.Add(-time.Minute))
		return replaceTime(b, holdDeadline, now.Add(time.Hour))
	}
	sum := sha256.Sum256(fill(t.digest))
	digest := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(digest, sum[:])
	return bytes.Replace(fill(t.sealed), holdDigest, digest, 1)
}

func replaceTime(b []byte, hold, t time.Time) []byte {
	return bytes.Replace(b, []byte(hold.Format(time.RFC3339)), []byte(t.Format(time.RFC3339)), 1)
}

// Seal encodes c and seals it with [capsule.Seal], the slow, general way.
func Seal(c *capsule.Capsule) ([]byte, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("bench: marshal capsule: %w", err)
	}
	sealed, err := capsule.Seal(raw)
	if err != nil {
		return nil, fmt.Errorf("bench: seal capsule: %w", err)
	}
	return sealed, nil
}
