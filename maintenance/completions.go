package maintenance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/runner"
	"github.com/sagad/sagad/store"
)

// CompletionsConfig configures [Completions].
type CompletionsConfig struct {
	// Logger receives a line per recorded completion (terminated ones are
	// logged by the runner). Defaults to discarding.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Completions is the maintenance service that ingests the results of
// accepted external work (SAGA_COMPLETIONS): it records each in the
// capsule's checkpoint and resumes the capsule.
type Completions struct {
	st    *store.Store
	admin *admin.Admin
	cfg   CompletionsConfig
	log   *slog.Logger
}

// NewCompletions returns the completion ingestor over st, acting through a.
func NewCompletions(st *store.Store, a *admin.Admin, cfg CompletionsConfig) *Completions {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Completions{st: st, admin: a, cfg: cfg, log: cfg.Logger}
}

// unknownAfter is how many deliveries find no checkpoint before a
// completion is taken for one of an unknown capsule (a read may be served
// by a replica that is behind).
const unknownAfter = 10

// Handle records the result of accepted work delivered on
// saga.complete.<capsule_id>.<cycle> and resumes the capsule, which then
// finishes EXECUTION without running the executor again.
//
// Anyone who may publish on the subject can send anything, so only a
// completion that carries the completion_token of the call the capsule
// awaits counts. Every other message is terminated and counted
// (sagad_messages_terminated_total{cause}), never completing nor halting the
// capsule: an undecodable body (completion_malformed), no or the wrong token
// (completion_unauthenticated), a cycle the capsule does not await, or no
// longer (completion_not_awaited). A worker's own failure is a completion
// with status "failed" and the right token.
func (in *Completions) Handle(ctx context.Context, msg jetstream.Msg) runner.Delivery {
	key, cycle, comp, bad := decodeCompletion(msg)
	if bad != nil {
		return *bad
	}
	cp, bad := in.awaiting(ctx, msg, key, cycle)
	if bad != nil {
		return *bad
	}
	st := cp.State
	// Before anything is stored: a forged completion must not even leave an
	// artifact behind. The machine checks again against the checkpoint it
	// changes, in case a newer call was accepted meanwhile.
	if !executors.CompletionTokenMatches(st.AwaitingTokenHash, comp.CompletionToken) {
		return runner.Term(metrics.TermCompletionUnauthenticated, unauthenticated(key, cycle))
	}
	// An operator who paused the capsule meanwhile keeps it paused: the
	// result is recorded, and their resume will use it.
	operatorHold := st.Pause.Trigger.Info().Operator
	if st.Result == nil || st.Result.Cycle != cycle {
		if d := in.record(ctx, key, cycle, &comp); d != nil {
			return *d
		}
	}
	if operatorHold {
		return runner.Ack()
	}
	if _, err := in.admin.Resume(ctx, key, admin.ResumeOptions{By: capsule.BySagad, Reason: "the external result arrived", Force: true}); err != nil && !errors.Is(err, admin.ErrRefused) {
		return runner.Retry(err)
	}
	return runner.Ack()
}

// decodeCompletion reads the capsule key and cycle from msg's subject and
// the completion from its body; bad says how to end a message that is no
// completion sagad takes.
func decodeCompletion(msg jetstream.Msg) (key string, cycle int, comp executors.Completion, bad *runner.Delivery) {
	term := func(cause string, err error) *runner.Delivery {
		d := runner.Term(cause, err)
		return &d
	}
	key, cycle, err := executors.ParseCompletionSubject(msg.Subject())
	if err == nil && !store.ValidKey(key) {
		err = fmt.Errorf("capsule key %q is no valid KV key", store.PrintableKey(key))
	}
	if err != nil {
		return "", 0, comp, term(metrics.TermBadSubject, err)
	}
	comp, err = executors.DecodeCompletion(msg.Data())
	if err != nil {
		return "", 0, comp, term(metrics.TermCompletionMalformed, fmt.Errorf("completion for %s cycle %d: %w", key, cycle, err))
	}
	if comp.Kind != executors.KindExecute {
		return "", 0, comp, term(metrics.TermReviewCompletion, errors.New("reviewers answer synchronously: review completions are not taken"))
	}
	if comp.CompletionToken == "" {
		return "", 0, comp, term(metrics.TermCompletionUnauthenticated, fmt.Errorf("completion for %s cycle %d: no completion_token", key, cycle))
	}
	return key, cycle, comp, nil
}

// awaiting reads key's checkpoint and returns it when it awaits cycle's
// completion; otherwise bad says how to end the message: later (a replica
// behind, a park not yet recorded) or never (unknown, corrupt, not awaited).
func (in *Completions) awaiting(ctx context.Context, msg jetstream.Msg, key string, cycle int) (*capsule.Checkpoint, *runner.Delivery) {
	end := func(d runner.Delivery) (*capsule.Checkpoint, *runner.Delivery) { return nil, &d }
	cp, _, err := in.st.Checkpoints.GetLatest(ctx, key, nil)
	if errors.Is(err, store.ErrNotFound) {
		// A read may be served by a replica that is behind: try again for
		// a while before giving up on the capsule.
		if md, merr := msg.Metadata(); merr == nil && md.NumDelivered >= unknownAfter {
			return end(runner.Term(metrics.TermUnknownCapsule, fmt.Errorf("completion: %w", err)))
		}
		return end(runner.Retry(err))
	}
	if in.st.Checkpoints.Corrupt.Report(err, "the completion is terminated") {
		// The checkpoint is no value sagad wrote: it reads the same on
		// every redelivery, and awaits no completion.
		return end(runner.Term(metrics.TermStateCorrupt, fmt.Errorf("completion: %w", err)))
	}
	if err != nil {
		return end(runner.Retry(err))
	}
	st := cp.State
	if st.Status == capsule.InProgress && st.Phase == capsule.Execution && st.Cycle == cycle {
		// The executor answered "accepted" and its result came back before
		// the capsule's park (and the call's token hash) was recorded: keep
		// the result until it is.
		return end(runner.Retry(nil))
	}
	waiting := st.Status == capsule.Paused && st.Pause != nil &&
		st.Phase == capsule.Execution && st.Cycle == cycle && st.AwaitingCycle == cycle
	if !waiting {
		return end(runner.Term(metrics.TermCompletionNotAwaited, fmt.Errorf("completion for %s cycle %d: not awaited (already recorded, or the capsule moved on; it is %s at %s cycle %d)",
			key, cycle, st.Status, st.Phase, st.Cycle)))
	}
	return cp, nil
}

// record stores the completion's artifact (unless the worker reported
// failure) and records the result on the checkpoint; a non-nil Delivery
// ends the message instead of going on to resume the capsule.
func (in *Completions) record(ctx context.Context, key string, cycle int, comp *executors.Completion) *runner.Delivery {
	end := func(d runner.Delivery) *runner.Delivery { return &d }
	_, c, err := in.st.Raw(ctx, key)
	if err != nil {
		return end(runner.Retry(fmt.Errorf("completion: %w", err)))
	}
	if c == nil {
		return end(runner.Ack())
	}
	result := &capsule.ExecutionResult{Cycle: cycle, Usage: comp.Usage}
	if comp.Status == executors.StatusFailed {
		result.Failed = strings.TrimSpace(comp.Error)
		if result.Failed == "" {
			result.Failed = "the executor reported failure"
		}
	} else {
		content := comp.Content
		ref, err := in.st.Artifacts.Put(ctx, capsule.Artifact{
			SchemaVersion: "1.0", CapsuleID: c.CapsuleID, ProducerAgentID: c.ProducerAgentID, Cycle: cycle,
			MediaType: comp.MediaType, SHA256: sha256Hex(content), Size: int64(len(content)), Usage: comp.Usage,
			CreatedAt: in.cfg.Now().UTC(), Content: json.RawMessage(content),
		})
		if err != nil {
			return end(runner.Retry(err))
		}
		result.ArtifactRef = ref
	}
	ev := machine.RecordResult{Cycle: cycle, Result: *result, TokenHash: executors.CompletionTokenHash(comp.CompletionToken)}
	if _, err := in.admin.Apply(ctx, key, ev); errors.Is(err, machine.ErrUnauthenticated) {
		return end(runner.Term(metrics.TermCompletionUnauthenticated, unauthenticated(key, cycle)))
	} else if in.st.Checkpoints.Corrupt.Report(err, "the completion is terminated") {
		return end(runner.Term(metrics.TermStateCorrupt, fmt.Errorf("completion: %w", err)))
	} else if err != nil {
		return end(runner.Retry(err))
	}
	in.log.Info("completion recorded", "key", key, "cycle", cycle, "status", comp.Status)
	return nil
}

// unauthenticated says why a completion was refused, never with its token.
func unauthenticated(key string, cycle int) error {
	return fmt.Errorf("completion for %s cycle %d: its completion_token is not the awaited call's", key, cycle)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
