package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Loop states (a verification loop's, [LoopRun].State).
const (
	// LoopRunning: a round runs ("" in the record).
	LoopRunning = "running"
	// LoopPassed: the verifier completed APPROVED by its reviewer.
	LoopPassed = "passed"
	// LoopFailed: max_rounds rounds ran and the verifier never passed.
	LoopFailed = "failed"
	// LoopNoProgress: two rounds in a row found no fewer findings than the
	// round before; a person decides (accept or reject).
	LoopNoProgress = "no_progress"
	// LoopAccepted: a person accepted a loop stopped for no_progress.
	LoopAccepted = "accepted"
	// LoopRejected: a person rejected a loop stopped for no_progress.
	LoopRejected = "rejected"
)

// ReasonNoProgress is the paused run's reason while a loop waits for a
// person ([LoopNoProgress]).
const ReasonNoProgress = "no_progress"

// LoopRun is one verification loop of a run: its steps, the round it is
// in and every round's capsules and findings.
type LoopRun struct {
	// Steps are the loop's steps as indexes into the record's Steps, the
	// verifier last.
	Steps     []int `json:"steps"`
	MaxRounds int   `json:"max_rounds"`
	// Round is the round running or last run, from 1.
	Round int `json:"round"`
	// State is "" while rounds run, then one of the Loop* states.
	State string `json:"state,omitempty"`
	// Rounds are the rounds started, oldest first.
	Rounds []LoopRound `json:"rounds"`
	// By and Reason say who decided a loop stopped for no_progress, and why.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// At is when State last changed.
	At *time.Time `json:"at,omitempty"`
}

// LoopRound is one round of a loop.
type LoopRound struct {
	// IDs are the round's capsule ids, aligned with [LoopRun].Steps.
	IDs []string `json:"ids"`
	// Ended is set once every step of the round ended.
	Ended bool `json:"ended,omitempty"`
	// Passed: the round's verifier completed APPROVED by its reviewer.
	Passed bool `json:"passed,omitempty"`
	// Findings counts the verifier's findings on the round.
	Findings int `json:"findings,omitempty"`
	// Tokens and Dollars are what the round's steps spent, once it ended:
	// the record's ends hold only the last round's.
	Tokens  int64   `json:"tokens,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
}

// StateOf is l's state: running until it passed, failed or stopped.
func (l *LoopRun) StateOf() string {
	if l.State == "" {
		return LoopRunning
	}
	return l.State
}

// Verifier is the index of l's verifier step.
func (l *LoopRun) Verifier() int { return l.Steps[len(l.Steps)-1] }

// Settled reports whether l lets the steps after it go on (passed, or
// accepted by a person).
func (l *LoopRun) Settled() bool { return l.State == LoopPassed || l.State == LoopAccepted }

// maxLoops matches composition.schema.json's loops maxItems.
const maxLoops = 16

// validLoops checks what a record's loops index.
func validLoops(r *ChainRecord) error {
	n := len(r.Steps)
	if len(r.Loops) > maxLoops {
		return errors.New("chain record: too many loops")
	}
	for _, l := range r.Loops {
		if len(l.Steps) == 0 || l.Round < 1 || len(l.Rounds) != l.Round || l.MaxRounds < 1 {
			return errors.New("chain record: malformed loop")
		}
		for _, i := range l.Steps {
			if i < 0 || i >= n {
				return errors.New("chain record: malformed loop steps")
			}
		}
		for _, rd := range l.Rounds {
			if len(rd.IDs) != len(l.Steps) {
				return errors.New("chain record: malformed loop round")
			}
		}
	}
	for _, i := range slices.Concat(r.Held, r.Unpublished) {
		if i < 0 || i >= n {
			return errors.New("chain record: malformed held steps")
		}
	}
	return nil
}

// docKey is where producer's document of digest (lowercase hex SHA-256)
// under chainID is kept: one token more than a run's key, which neither
// the run lookups nor the producers' listing read as a record; by digest,
// so two sagads making the same run of two documents at once each keep
// their own.
func docKey(chainID, producer, digest string) string {
	return chainKey(chainID, producer) + ".doc." + digest
}

// ErrBadDigest refuses a document digest that is not lowercase hex SHA-256.
var ErrBadDigest = errors.New("document digest: want 64 lowercase hex digits")

func validDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	for _, c := range d {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// PutDoc keeps the document b, of digest, of a run whose steps sagad
// builds later (a verification loop's rounds, the steps held until a loop
// passes): the runner builds them from it. Writing it again is harmless.
func (c *Chains) PutDoc(ctx context.Context, chainID, producer, digest string, b []byte) error {
	if !validDigest(digest) {
		return ErrBadDigest
	}
	if _, err := c.kv.Put(ctx, docKey(chainID, producer, digest), b); err != nil {
		return fmt.Errorf("chain %s document: %w", chainID, err)
	}
	return nil
}

// Doc returns the document PutDoc kept; it wraps [ErrNotFound] when there
// is none.
func (c *Chains) Doc(ctx context.Context, chainID, producer, digest string) ([]byte, error) {
	if !validDigest(digest) {
		return nil, ErrBadDigest
	}
	e, err := c.kv.Get(ctx, docKey(chainID, producer, digest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: chain %s document %s", ErrNotFound, chainID, digest)
	}
	if err != nil {
		return nil, fmt.Errorf("chain %s document: %w", chainID, err)
	}
	return e.Value(), nil
}
