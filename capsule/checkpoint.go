package capsule

import (
	"slices"
	"strings"
	"time"
)

// CheckpointSchemaVersion is the version written in every checkpoint.
const CheckpointSchemaVersion = "1.0"

// Checkpoint is the durable record of a capsule's progress, one per capsule in
// the checkpoint KV bucket. Every change goes through a compare-and-set on the
// KV revision, which is what makes each transition happen exactly once.
type Checkpoint struct {
	SchemaVersion string `json:"schema_version"`
	CapsuleID     string `json:"capsule_id"`
	Key           string `json:"key"`
	TraceID       string `json:"trace_id"`
	// TraceParent is the W3C traceparent of the capsule's root span, made
	// at RECEPTION (a child of the producer's span when the intake message
	// carried one): every phase span descends from it, whichever sagad
	// runs the phase (package internal/tracing). Its trace id is the
	// OpenTelemetry trace id of the capsule, which equals TraceID when
	// TraceID is one. Empty in checkpoints written before sagad traced.
	TraceParent string `json:"trace_parent,omitempty"`
	// TraceProducerSpan is the span id of the producer's span named by the
	// intake message's traceparent, if any: the parent of the capsule's
	// root span, which is recorded when the capsule ends.
	TraceProducerSpan string `json:"trace_producer_span,omitempty"`
	WaveID            string `json:"wave_id,omitempty"`
	// Producer is the producer account the capsule came from: the last
	// token of its intake subject (saga.intake.<producer>), which the
	// producer's account import fixes (sagad publishes a composition's
	// steps on the producer's subject too). Empty for sagad's own intake.
	Producer string `json:"producer,omitempty"`
	// Chain is the capsule's chain and step (its chain member), so that
	// lists can filter by chain. Absent outside a chain.
	Chain  *ChainStep `json:"chain,omitempty"`
	Digest string     `json:"digest,omitempty"`
	// Constitution is the version of the constitution in force where the
	// capsule was received (rules.VersionOf: the rules' version and a
	// digest of their parameters), so a capsule's judgement can be traced
	// to the rules it was judged by. Empty in checkpoints written before
	// sagad recorded it.
	Constitution string `json:"constitution,omitempty"`
	// Parent is the checkpoint key of the capsule whose executor call
	// published this one (its parent_capsule_id, verified at RECEPTION
	// against that call's token); empty for a root capsule.
	Parent string `json:"parent,omitempty"`
	// Depth is how many parents are above the capsule: 0 (absent) for a
	// root, the parent's depth + 1 for a child. RECEPTION refuses a
	// depth over sagad's --max-depth (depth_exceeded:<depth>).
	Depth int `json:"depth,omitempty"`
	// ChildLimit is what the parent's budget.child allows this child,
	// recorded at RECEPTION from the parent's kept capsule; absent for a
	// root and for a child whose parent sets no limit.
	ChildLimit *ChildLimit `json:"child_limit,omitempty"`
	// IntakeSeq is the intake stream sequence of the message that created
	// the checkpoint.
	IntakeSeq uint64 `json:"intake_seq,omitempty"`
	// OutcomeEmitted records that the ended capsule's outcome message was
	// acknowledged. Only checkpoints of earlier versions carry it: sagad now
	// marks the capsule's bytes in SAGA_CAPSULES instead, which saves a
	// checkpoint write per capsule.
	OutcomeEmitted bool `json:"outcome_emitted,omitempty"`
	// Run numbers the capsule's runs: 0 (written as absent) is the first,
	// and each replay of a halted or cancelled capsule starts the next
	// (see [Checkpoint.RunNumber] and machine.Replay).
	Run int `json:"run,omitempty"`
	// CycleBase is the last cycle of the runs before this one: cycles
	// number on across runs (so every run's transitions, events,
	// artifacts, budget charges and agent idempotency keys are its own),
	// and Rule 12 counts this run's cycles, Cycle - CycleBase.
	CycleBase int `json:"cycle_base,omitempty"`
	// ReplayToken is the token of the replay that started this run: the
	// same replay tried again finds its run started and finishes it.
	ReplayToken string          `json:"replay_token,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	State       CheckpointState `json:"state"`
	History     []Transition    `json:"history"`
}

// CheckpointState is the nested state block of a checkpoint.
type CheckpointState struct {
	Phase        Phase         `json:"phase"`
	PhaseName    string        `json:"phase_name"`
	Progress     int           `json:"progress"`
	Cycle        int           `json:"cycle"`
	Status       State         `json:"status"`
	HaltReason   string        `json:"halt_reason,omitempty"`
	BudgetUsed   Usage         `json:"budget_used"`
	LocksHeld    []string      `json:"locks_held"`
	ArtifactRefs []string      `json:"artifact_refs"`
	Findings     []Finding     `json:"findings,omitempty"`
	Reviews      []ReviewEntry `json:"reviews,omitempty"`
	// Execution is the claim EXECUTION takes before running the executor for
	// a cycle; a claim that outlives its lease belongs to a dead holder.
	Execution *ExecutionClaim `json:"execution,omitempty"`
	// Result is the executor result recorded for the current cycle, so a
	// redelivery never runs the executor again for it.
	Result *ExecutionResult `json:"result,omitempty"`
	// Attempts counts the current cycle's failed executor calls (failure
	// policy, attempts.go).
	Attempts *ExecutionAttempts `json:"attempts,omitempty"`
	// AttemptLog lists the failed agent calls of every cycle, oldest first
	// (the newest [MaxAttemptLog]), with the failure policy's decision:
	// what status and history show of retries.
	AttemptLog []FailedAttempt `json:"attempt_log,omitempty"`
	// Pause says why the capsule is paused or waiting, and carries the token
	// of a resume in flight.
	Pause *PauseInfo `json:"pause,omitempty"`
	// Overrides are operator changes made on resume (raised caps, a later deadline).
	Overrides *Overrides `json:"overrides,omitempty"`
	// Warned remembers which warning triggers already fired, so a resumed
	// capsule is not paused again for the same reason.
	Warned []Trigger `json:"warned,omitempty"`
	// LockWaitSince is when EXECUTION first found a lock held by another capsule.
	LockWaitSince *time.Time `json:"lock_wait_since,omitempty"`
	// AwaitingCycle is the cycle whose executor result is expected on the
	// completion subject (blocked_external on accepted work).
	AwaitingCycle int `json:"awaiting_cycle,omitempty"`
	// AwaitingUntil is when the awaited result is overdue: the acceptance
	// time plus the endpoint's completion_timeout. Checkpoints written
	// before it existed use the daemon's --external-timeout.
	AwaitingUntil *time.Time `json:"awaiting_until,omitempty"`
	// WaitingFor are the dependencies a waiting capsule still waits for,
	// or its wave's id while it waits for the wave's capacity.
	WaitingFor []string `json:"waiting_for,omitempty"`
	// AwaitingTokenHash is the SHA-256 (lowercase hex) of the completion
	// token of the call that accepted the awaited work: a completion is
	// taken only with the token that hashes to it. Only the hash is kept,
	// so whoever reads checkpoints cannot forge a completion.
	AwaitingTokenHash string `json:"awaiting_token_sha256,omitempty"`
	// WaveReserved is what AUTOMATED_GATES reserved of the capsule's wave
	// (its caps): recorded with the transition that admitted it. The
	// reservation is held in the wave's budget record until the capsule
	// ends, when what it did not use is released (package budget).
	WaveReserved *Usage `json:"wave_reserved,omitempty"`
	// OperatorAnswer is the latest answer a person gave the capsule (a
	// resume's --answer, a revise's rationale): every later executor call
	// carries it, so what a human resolved reaches the agent.
	OperatorAnswer *OperatorAnswer `json:"operator_answer,omitempty"`
	// Answers are the answers people gave with their resumes (`sagactl
	// resume --answer`), oldest first, the newest [MaxAnswerLog]: what
	// status, history and report show of them (OperatorAnswer is only the
	// latest, a revise's rationale included; the revise's own record is
	// its review).
	Answers []OperatorAnswer `json:"answers,omitempty"`
	// AgentQueries are the questions the running call's agent asked a
	// person (trigger agent_query), oldest first: cleared by their
	// answers, and when the call ends (its phase's decision, a failed
	// attempt, a new claim).
	AgentQueries []AgentQuery `json:"agent_queries,omitempty"`
}

// MaxAnswerLog bounds [CheckpointState.Answers]; each answer is at most the
// admin service's 16 KiB of text.
const MaxAnswerLog = 8

// RecordAnswer appends a to the answers log, keeping the newest
// [MaxAnswerLog].
func (s *CheckpointState) RecordAnswer(a OperatorAnswer) {
	log := append(slices.Clone(s.Answers), a) // s.Answers may be shared with Apply's input
	if n := len(log); n > MaxAnswerLog {
		log = log[n-MaxAnswerLog:]
	}
	s.Answers = log
}

// OperatorAnswer is what a person answered, who, and when.
type OperatorAnswer struct {
	Text string    `json:"text"`
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at"`
}

// PauseInfo describes a pause or an operator wait.
type PauseInfo struct {
	Trigger Trigger   `json:"trigger"`
	Reason  string    `json:"reason,omitempty"`
	By      string    `json:"by,omitempty"`
	At      time.Time `json:"at"`
	// ResumeToken is set by a resume in flight; the phase message carrying
	// the same token may take the capsule back to in_progress.
	ResumeToken string `json:"resume_token,omitempty"`
}

// Overrides are operator decisions that change a capsule's limits without
// changing its (sealed) bytes.
type Overrides struct {
	Tokens   int64      `json:"tokens,omitempty"`
	Dollars  float64    `json:"dollars,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// ChildLimit is a child's [ChildBudget] as its checkpoint keeps it.
type ChildLimit struct {
	// MaxAttempts bounds the EXECUTION agent calls of the child's run (0:
	// no bound).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// WallUntil is the reception time plus max_wall_time: folded into the
	// child's deadline in force (its overrides), and when that deadline
	// is this one, its passing halts child_limit_exceeded:wall_time.
	WallUntil *time.Time `json:"wall_until,omitempty"`
}

// ExecutionCalls counts the EXECUTION agent calls of the checkpoint's run
// before cycle's: one that succeeded (or whose work was accepted) for each
// earlier cycle of the run, plus the failed ones the attempt log records
// for them. The log keeps the newest [MaxAttemptLog] failures, more than a
// child's limit of [MaxChildAttempts] calls.
func (c *Checkpoint) ExecutionCalls(cycle int) int {
	n := max(cycle-c.CycleBase-1, 0)
	for _, a := range c.State.AttemptLog {
		if a.Phase == Execution && a.Cycle > c.CycleBase && a.Cycle < cycle {
			n++
		}
	}
	return n
}

// DeadlineHalt is the halt reason of a capsule whose deadline in force
// (given the capsule's own, d) passed at phase: child_limit_exceeded:
// wall_time when that deadline is its child limit's, else
// deadline_exceeded.
func (c *Checkpoint) DeadlineHalt(phase Phase, d time.Time) HaltReason {
	if l := c.ChildLimit; l != nil && l.WallUntil != nil && c.State.DeadlineIn(d).Equal(*l.WallUntil) {
		return ChildLimitExceeded(ChildLimitWallTime)
	}
	return DeadlineExceeded(phase)
}

// Caps returns the budget in force: the capsule's, raised by overrides.
func (s *CheckpointState) Caps(b Budget) Budget {
	if s.Overrides != nil {
		if s.Overrides.Tokens > 0 {
			b.Tokens = s.Overrides.Tokens
		}
		if s.Overrides.Dollars > 0 {
			b.Dollars = s.Overrides.Dollars
		}
	}
	return b
}

// DeadlineIn returns the deadline in force: the capsule's, or the override.
func (s *CheckpointState) DeadlineIn(d time.Time) time.Time {
	if s.Overrides != nil && s.Overrides.Deadline != nil {
		return *s.Overrides.Deadline
	}
	return d
}

// AwaitsExternal reports a capsule paused on work an executor accepted
// (blocked_external with an awaited cycle): it is still running, elsewhere,
// and goes on by itself when the result comes or the wait is overdue; no
// person needs to act.
func (s *CheckpointState) AwaitsExternal() bool {
	return s.Status == Paused && s.Pause != nil && s.Pause.Trigger.Info().Watch == WatchExternal && s.AwaitingCycle > 0
}

// HasWarned reports whether trigger t already fired for this capsule.
func (s *CheckpointState) HasWarned(t Trigger) bool {
	for _, w := range s.Warned {
		if w == t {
			return true
		}
	}
	return false
}

// ExecutionClaim marks that an instance is running the executor for a cycle.
type ExecutionClaim struct {
	Cycle     int       `json:"cycle"`
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expires_at"`
	// CallTokenHash is the SHA-256 (lowercase hex) of the call_token the
	// claim's executor calls carry: a worker serving one publishes a child
	// capsule with that token, which RECEPTION checks here. Only the hash
	// is kept, so whoever reads checkpoints cannot claim a parent.
	CallTokenHash string `json:"call_token_sha256,omitempty"`
}

// ExecutionResult is what one executor run produced.
type ExecutionResult struct {
	Cycle       int    `json:"cycle"`
	ArtifactRef string `json:"artifact_ref,omitempty"`
	Usage       Usage  `json:"usage"`
	Failed      string `json:"failed,omitempty"`
}

// ReviewEntry is the review recorded for one cycle.
type ReviewEntry struct {
	Cycle      int       `json:"cycle"`
	ReviewerID string    `json:"reviewer_id"`
	Verdict    Verdict   `json:"verdict"`
	Findings   []Finding `json:"findings,omitempty"`
	Usage      Usage     `json:"usage"`
	At         time.Time `json:"at"`
}

// Transition outcomes recorded in a checkpoint's history.
const (
	OutcomePassed     = "passed"
	OutcomeLoopedBack = "looped_back"
	OutcomeHalted     = "halted"
	OutcomeCompleted  = "completed"
	OutcomeCancelled  = "cancelled"
	// OutcomeReplayed marks a run boundary: the entry records, at the
	// position where the previous run ended, that a replay started the
	// next run (its Run) and from where (its Detail).
	OutcomeReplayed = "replayed"
)

// Who acted, in events and pauses, when it was sagad itself.
const BySagad = "sagad"

// Transition is one entry of the phase history: phase p of cycle c ended with
// outcome at time at. It is appended exactly once per transition.
type Transition struct {
	Phase     Phase  `json:"phase"`
	PhaseName string `json:"phase_name"`
	Cycle     int    `json:"cycle"`
	Outcome   string `json:"outcome"`
	Detail    string `json:"detail,omitempty"`
	// Run is the run the transition belongs to; 0 (absent) is the first.
	Run int       `json:"run,omitempty"`
	At  time.Time `json:"at"`
}

// LastReviewFindings returns a copy of the findings of the latest review: what
// the next EXECUTION cycle is asked to address.
func (c *Checkpoint) LastReviewFindings() []Finding {
	if n := len(c.State.Reviews); n > 0 {
		return cloneFindings(c.State.Reviews[n-1].Findings)
	}
	return nil
}

// OperatorReviewerPrefix starts the reviewer id of a review an operator
// recorded (a revise, a reject): "operator:<by>".
const OperatorReviewerPrefix = "operator:"

// RevisionFindings returns a copy of what a revision cycle addresses: the
// latest review's findings and, when that review is an operator's revise,
// first the findings of the reviewer's review of the same cycle it
// overrode, so a revise adds the person's word to the reviewer's instead of
// replacing it.
func (c *Checkpoint) RevisionFindings() []Finding {
	n := len(c.State.Reviews)
	if n == 0 {
		return nil
	}
	last := c.State.Reviews[n-1]
	if !strings.HasPrefix(last.ReviewerID, OperatorReviewerPrefix) {
		return cloneFindings(last.Findings)
	}
	var out []Finding
	for i := n - 2; i >= 0; i-- {
		r := c.State.Reviews[i]
		if r.Cycle != last.Cycle {
			break
		}
		if !strings.HasPrefix(r.ReviewerID, OperatorReviewerPrefix) {
			out = append(out, r.Findings...)
			break
		}
	}
	for _, f := range last.Findings {
		// Checkpoints written before findings had a source.
		f.Source = FindingSourceOperator
		out = append(out, f)
	}
	return out
}

// RunNumber is the capsule's run, counted from 1.
func (c *Checkpoint) RunNumber() int { return max(c.Run, 1) }

// RunCycle is cycle counted within the current run (Rule 12's count).
func (c *Checkpoint) RunCycle(cycle int) int { return cycle - c.CycleBase }

// Terminal reports whether the checkpoint's capsule has finished.
func (c *Checkpoint) Terminal() bool { return c.State.Status.Terminal() }

// Find returns the history entry for (phase, cycle), if there is one.
func (c *Checkpoint) Find(p Phase, cycle int) (Transition, bool) {
	for _, t := range c.History {
		if t.Phase == p && t.Cycle == cycle {
			return t, true
		}
	}
	return Transition{}, false
}

// Clone returns a copy of c that can be changed without changing c. Only the
// phase history is shared: it is only ever appended to (a transition is
// recorded once and never changed), and the copy's is clipped, so an append
// to it allocates anew. Every other slice and pointer is copied.
func (c *Checkpoint) Clone() *Checkpoint {
	if c == nil {
		return nil
	}
	out := *c
	out.History = slices.Clip(c.History)
	if c.ChildLimit != nil {
		l := *c.ChildLimit
		l.WallUntil = clonePtr(l.WallUntil)
		out.ChildLimit = &l
	}
	st := &out.State
	st.LocksHeld = cloneStrings(c.State.LocksHeld)
	st.ArtifactRefs = cloneStrings(c.State.ArtifactRefs)
	st.Findings = cloneFindings(c.State.Findings)
	if c.State.Reviews != nil {
		st.Reviews = make([]ReviewEntry, len(c.State.Reviews))
		for i, r := range c.State.Reviews {
			r.Findings = cloneFindings(r.Findings)
			st.Reviews[i] = r
		}
	}
	if c.State.Warned != nil {
		st.Warned = append([]Trigger{}, c.State.Warned...)
	}
	st.Execution = clonePtr(c.State.Execution)
	st.Result = clonePtr(c.State.Result)
	st.Attempts = clonePtr(c.State.Attempts)
	st.AttemptLog = slices.Clone(c.State.AttemptLog)
	st.Pause = clonePtr(c.State.Pause)
	st.LockWaitSince = clonePtr(c.State.LockWaitSince)
	st.AwaitingUntil = clonePtr(c.State.AwaitingUntil)
	st.WaitingFor = cloneStrings(c.State.WaitingFor)
	st.WaveReserved = clonePtr(c.State.WaveReserved)
	st.OperatorAnswer = clonePtr(c.State.OperatorAnswer)
	st.Answers = slices.Clone(c.State.Answers)
	st.AgentQueries = slices.Clone(c.State.AgentQueries)
	if o := c.State.Overrides; o != nil {
		cp := *o
		cp.Deadline = clonePtr(o.Deadline)
		st.Overrides = &cp
	}
	return &out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

func cloneFindings(f []Finding) []Finding {
	if f == nil {
		return nil
	}
	return append([]Finding{}, f...)
}
