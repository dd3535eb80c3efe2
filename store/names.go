package store

import (
	"fmt"

	"github.com/sagad/sagad/capsule"
)

// Stream, subject, consumer and bucket names (see the package doc).
const (
	IntakeStream   = "SAGA_INTAKE"
	IntakeSubject  = "saga.intake"
	EventsStream   = "SAGA_EVENTS"
	EventsPrefix   = "saga.events."
	OutcomesStream = "SAGA_OUTCOMES"
	OutcomePrefix  = "saga.outcome."
	// CompletionsStream holds results of accepted external work, published
	// by workers on saga.complete.<capsule_id>.<cycle>.
	CompletionsStream   = "SAGA_COMPLETIONS"
	CompletionsConsumer = "completions"

	CheckpointsBucket   = "SAGA_CHECKPOINTS"
	ContinuationsBucket = "SAGA_CONTINUATIONS"
	CapsulesBucket      = "SAGA_CAPSULES"
	ArtifactsBucket     = "SAGA_ARTIFACTS"
	// ArtifactRecordsBucket holds the artifact records that fit one message
	// (up to 128 KiB), one put each; larger ones are objects of
	// ArtifactsBucket (see [Artifacts]).
	ArtifactRecordsBucket = "SAGA_ARTIFACT_RECORDS"
)

// RetentionMetadata is the SAGA_CHECKPOINTS bucket metadata key that holds
// the retention sagad runs with (a Go duration), for sagactl's admin actions.
const RetentionMetadata = "sagad_retention"

// Message headers sagad sets on everything it publishes.
const (
	HeaderCapsuleID = "Saga-Capsule-Id"
	HeaderKey       = "Saga-Key"
	// HeaderOutcomeSent marks an ended capsule's bytes in SAGA_CAPSULES once
	// its outcome was acknowledged.
	HeaderOutcomeSent = "Saga-Outcome-Sent"
	// HeaderRun names the run of a replayed capsule (2, 3, …) on its kept
	// bytes and its outcome; absent, the first.
	HeaderRun        = "Saga-Run"
	HeaderPhase      = "Saga-Phase"
	HeaderCycle      = "Saga-Cycle"
	HeaderTraceID    = "Saga-Trace-Id"
	HeaderHaltReason = "Saga-Halt-Reason"
	HeaderState      = "Saga-State"
	HeaderArtifacts  = "Saga-Artifact-Refs"
	// HeaderConstitution is, on an outcome, the constitution version the
	// capsule was received under (its checkpoint's constitution).
	HeaderConstitution = "Saga-Constitution"
	// HeaderAcceptedOver, on a completed capsule's outcome, says an operator
	// accepted its artifact over the reviewer's verdict: "<verdict> by <who>".
	HeaderAcceptedOver = "Saga-Accepted-Over"
	// HeaderEventID carries an event's deterministic id; a reader seeing
	// it twice drops the repeat.
	HeaderEventID = "Saga-Event-Id"
	// HeaderResumeToken marks the phase message a resume sent; only it may
	// take a paused capsule back to in_progress.
	HeaderResumeToken = "Saga-Resume-Token"
	// HeaderDeferred, on a phase message, names the phases before it whose
	// advance was decided but not written: "<phase>:<unix nanoseconds>",
	// comma separated, ascending. The phase receiving it decides them again
	// and writes them with its own first write (see [Deferred]).
	HeaderDeferred = "Saga-Deferred"
	// HeaderClaim, on the REVIEW message EXECUTION's result write sends,
	// names the claim that write took for the message's first delivery:
	// "<expires_at unix nanoseconds>:<holder>" (see [Claimed]).
	HeaderClaim = "Saga-Claim"
)

// PhaseStream is the stream that feeds phase p.
func PhaseStream(p capsule.Phase) string {
	if p == capsule.Reception {
		return IntakeStream
	}
	return fmt.Sprintf("SAGA_PHASE_%d", p)
}

// PhaseSubject is the subject that feeds phase p.
func PhaseSubject(p capsule.Phase) string {
	if p == capsule.Reception {
		return IntakeSubject
	}
	if p.Valid() {
		return phaseSubjects[p] // every phase message names one: not formatted each time
	}
	return fmt.Sprintf("saga.phase.%d", p)
}

var phaseSubjects = func() (s [capsule.NumPhases]string) {
	for p := range s {
		s[p] = fmt.Sprintf("saga.phase.%d", p)
	}
	return s
}()

// ConsumerName is the durable consumer of phase p, shared by every sagad.
func ConsumerName(p capsule.Phase) string {
	if p.Valid() {
		return consumerNames[p] // every phase span names one: not formatted each time
	}
	return fmt.Sprintf("phase-%d", p)
}

var consumerNames = func() (s [capsule.NumPhases]string) {
	for p := range s {
		s[p] = fmt.Sprintf("phase-%d", p)
	}
	return s
}()

// EventSubject is the lifecycle event subject of the capsule with key.
func EventSubject(key string) string { return EventsPrefix + key }

// OutcomeSubject is where a capsule that ended in state s is emitted.
func OutcomeSubject(s capsule.State) string { return OutcomePrefix + string(s) }

// capsuleSubject is the KV subject of a capsule's bytes in SAGA_CAPSULES.
func capsuleSubject(key string) string { return "$KV." + CapsulesBucket + "." + key }
