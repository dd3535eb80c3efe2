package metrics

import (
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/rules"
)

// Other is the label value recorded for anything outside a label's closed
// set, so a bug or a hostile input can never grow the number of series.
const Other = "other"

// Transition outcomes [Metrics.Transition] labels with, besides the
// checkpoint outcomes of package capsule (passed, looped_back, halted,
// completed, cancelled).
const (
	// OutcomePaused: the phase stopped because a pause trigger fired.
	OutcomePaused = "paused"
	// OutcomeWaiting: the phase handed the capsule to an operator.
	OutcomeWaiting = "waiting_for_operator"
	// OutcomeRetried: the phase failed transiently and its message will be
	// redelivered; no transition was recorded.
	OutcomeRetried = "retried"
)

// Outcomes is the closed set of outcome label values.
var Outcomes = []string{
	capsule.OutcomePassed, capsule.OutcomeLoopedBack, capsule.OutcomeHalted,
	capsule.OutcomeCompleted, capsule.OutcomeCancelled,
	OutcomePaused, OutcomeWaiting, OutcomeRetried,
}

// Agent call kinds and results for [Metrics.Call].
const (
	KindExecutor = "executor"
	KindReviewer = "reviewer"

	// ResultOK: the call answered with a result.
	ResultOK = "ok"
	// ResultFailed: the call answered with a failure (a halt follows).
	ResultFailed = "failed"
	// ResultTransient: the call could not be made or timed out; it is retried.
	ResultTransient = "transient"
	// ResultAccepted: the agent accepted long work and will answer later.
	ResultAccepted = "accepted"
)

// CallKinds and CallResults are the closed label sets of agent calls.
var (
	CallKinds   = []string{KindExecutor, KindReviewer}
	CallResults = []string{ResultOK, ResultFailed, ResultTransient, ResultAccepted}
)

// Attempt results for [Metrics.Attempt]: a call that succeeded, or the
// failure policy's decision on one that failed (capsule.AttemptRetried,
// AttemptPaused, AttemptHalted).
const (
	AttemptOK      = "ok"
	AttemptRetried = capsule.AttemptRetried
	AttemptPaused  = capsule.AttemptPaused
	AttemptHalted  = capsule.AttemptHalted
)

// AttemptResults is the closed label set of sagad_agent_attempts_total's
// result.
var AttemptResults = []string{AttemptOK, AttemptRetried, AttemptPaused, AttemptHalted}

// Operator actions for [Metrics.AdminAction].
const (
	ActionPause       = "pause"
	ActionResume      = "resume"
	ActionCancel      = "cancel"
	ActionAccept      = "accept" // sagactl decide accept
	ActionRevise      = "revise" // sagactl decide revise
	ActionReject      = "reject" // sagactl decide reject
	ActionPhasePause  = "phase_pause"
	ActionPhaseResume = "phase_resume"
	ActionPauseAll    = "pause_all"
	ActionResumeAll   = "resume_all"
	ActionReplay      = "replay"
	ActionWaveSet     = "wave_set"   // sagactl wave set
	ActionWaveClose   = "wave_close" // sagactl wave close
	ActionAnswer      = "answer"     // sagactl resume --answer to an agent's question
)

// Reasons a message is terminated ([Metrics.Terminated]): it can never
// succeed, so it is neither acknowledged as done nor retried.
const (
	TermNoKey            = "no_key"            // a phase message without a capsule key
	TermInvalidKey       = "invalid_key"       // a key that is no valid KV key
	TermBadHeader        = "bad_header"        // a cycle header that is no number
	TermUndecodable      = "undecodable"       // a body that cannot be decoded
	TermUnknownCapsule   = "unknown_capsule"   // no checkpoint after the grace period
	TermBadSubject       = "bad_subject"       // a completion subject that names no (capsule, cycle)
	TermReviewCompletion = "review_completion" // reviewers answer synchronously
	// TermCompletionMalformed: a completion whose body is no valid
	// completion; it never completes nor halts its capsule.
	TermCompletionMalformed = "completion_malformed"
	// TermCompletionUnauthenticated: a completion without the
	// completion_token of the call its capsule awaits (forged, or a
	// superseded call's).
	TermCompletionUnauthenticated = "completion_unauthenticated"
	// TermCompletionNotAwaited: a completion for a cycle its capsule does
	// not await (already recorded, or the capsule moved on or ended).
	TermCompletionNotAwaited = "completion_not_awaited"
	// TermStateCorrupt: the message is about a capsule whose state in
	// sagad's buckets sagad did not write (see package internal/corrupt).
	TermStateCorrupt = "state_corrupt"
	// TermCompositionUnrecorded: a composition step's end that sagad
	// could not record in its run's record after the bounded number of
	// deliveries (package compose).
	TermCompositionUnrecorded = "composition_step_unrecorded"
)

// TermReasons is the closed set of reason label values of terminations.
var TermReasons = []string{
	TermNoKey, TermInvalidKey, TermBadHeader, TermUndecodable, TermUnknownCapsule, TermBadSubject, TermReviewCompletion,
	TermCompletionMalformed, TermCompletionUnauthenticated, TermCompletionNotAwaited, TermStateCorrupt,
	TermCompositionUnrecorded,
}

// Kinds of failed JetStream writes ([Metrics.WriteFailed]); package health
// sorts every failed write into one.
const (
	// WriteTimeout: no answer within the write's deadline.
	WriteTimeout = "timeout"
	// WriteNoResponders: nothing answered the write's subject (no stream
	// leader, or the server's JetStream is down).
	WriteNoResponders = "no_responders"
	// WriteStorage: JetStream refused the write for lack of resources (disk
	// full, the account's or server's storage limit reached, a store failure).
	WriteStorage = "storage"
	// WriteUnavailable: JetStream answered that it cannot serve the write
	// now (no quorum, JetStream disabled).
	WriteUnavailable = "unavailable"
	// WriteConnection: the NATS connection is closed or down.
	WriteConnection = "connection"
)

// WriteErrorKinds is the closed set of kind label values of failed writes
// (and [Other]).
var WriteErrorKinds = []string{WriteTimeout, WriteNoResponders, WriteStorage, WriteUnavailable, WriteConnection, Other}

// AdminActions is the closed set of action label values.
var AdminActions = []string{
	ActionPause, ActionResume, ActionCancel, ActionAccept, ActionRevise, ActionReject, ActionPhasePause,
	ActionPhaseResume, ActionPauseAll, ActionResumeAll, ActionReplay, ActionWaveSet, ActionWaveClose,
	ActionAnswer,
}

// Triggers is the closed set of triggers the trigger label takes the
// value of (their Metric in capsule.TriggerTable): the five continuation
// triggers of PIPELINE §5, operator_gate (a capsule waiting_for_operator),
// and the two of state waiting: dependencies and wave_capacity.
var Triggers = capsule.AllTriggers()

// Verdicts is the closed set of review verdicts.
var Verdicts = []capsule.Verdict{capsule.Approved, capsule.ChangesRequested, capsule.Rejected}

// Histogram buckets, in seconds.
var (
	// phaseBuckets span a millisecond validation to a ten-minute executor
	// run (the default phase timeout).
	phaseBuckets = []float64{0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// lockBuckets end past 60s, the lock_contention pause threshold.
	lockBuckets = []float64{0.001, 0.005, 0.025, 0.1, 0.5, 1, 5, 10, 30, 60, 120}
	// callBuckets span a stub's microseconds to a long agent run.
	// compositionStepBuckets are steps per composition, up to the 256 a
	// document may hold.
	compositionStepBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	callBuckets            = []float64{0.01, 0.05, 0.25, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// BuildInfo is what sagad_build_info reports.
type BuildInfo struct {
	// Version of sagad. Defaults to the main module's version from the
	// binary's build information, or "unknown".
	Version string
	// GoVersion that built sagad. Defaults to runtime.Version().
	GoVersion string
}

func (b BuildInfo) withDefaults() BuildInfo {
	if b.Version == "" {
		b.Version = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			b.Version = bi.Main.Version
		}
	}
	if b.GoVersion == "" {
		b.GoVersion = runtime.Version()
	}
	return b
}

// Metrics records what the pipeline does. Create it with [New]; a nil
// *Metrics records nothing.
type Metrics struct {
	received       prometheus.Counter
	completed      prometheus.Counter
	halted         *prometheus.CounterVec
	cancelled      prometheus.Counter
	transitions    *prometheus.CounterVec
	phaseDuration  *prometheus.HistogramVec
	verdicts       *prometheus.CounterVec
	ruleViolations *prometheus.CounterVec
	lockWait       prometheus.Histogram
	lockContention prometheus.Counter
	calls          *prometheus.CounterVec
	attempts       *prometheus.CounterVec
	callDuration   *prometheus.HistogramVec
	redeliveries   *prometheus.CounterVec
	pauses         *prometheus.CounterVec
	resumes        *prometheus.CounterVec
	adminActions   *prometheus.CounterVec
	terminated     *prometheus.CounterVec
	corrupt        *prometheus.CounterVec
	rescued        *prometheus.CounterVec
	writeErrors    *prometheus.CounterVec
	writesFailing  prometheus.Gauge
	busyRedeliver  prometheus.Counter
	compSteps      prometheus.Histogram
	spend          *spend
	// phaseLat and callLat are phaseDuration's and callDuration's series
	// (with transitions' counters for phaseLat) by index, and now the
	// clock their exemplars are timed by, from since.
	phaseLat, callLat *latencies
	now               func() time.Time
	since             time.Time
	// awaitingOperator is the count of capsules waiting for an operator
	// decision the rescuer last made, -1 before its first (see
	// [Metrics.AwaitingOperator]).
	awaitingOperator atomic.Int64
}

// New creates the recorder and registers its metrics on reg (nil registers
// nothing, for tests). Like prometheus.MustRegister it panics if reg already
// holds metrics of the same names: create one Metrics per registry.
func New(reg prometheus.Registerer, build BuildInfo) *Metrics {
	f := promauto.With(reg)
	build = build.withDefaults()
	f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sagad_build_info",
		Help: "Build information of the running sagad; always 1.",
	}, []string{"version", "go_version"}).WithLabelValues(build.Version, build.GoVersion).Set(1)

	m := &Metrics{
		received: f.NewCounter(prometheus.CounterOpts{
			Name: "sagad_capsules_received_total",
			Help: "Capsules (or unreadable intake messages) RECEPTION took in for the first time.",
		}),
		completed: f.NewCounter(prometheus.CounterOpts{
			Name: "sagad_capsules_completed_total",
			Help: "Capsules that completed HANDOFF.",
		}),
		halted: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_capsules_halted_total",
			Help: "Capsules that halted, by halt code (the reason without its detail).",
		}, []string{"reason"}),
		cancelled: f.NewCounter(prometheus.CounterOpts{
			Name: "sagad_capsules_cancelled_total",
			Help: "Capsules an operator cancelled.",
		}),
		transitions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_transitions_total",
			Help: "Phase runs that ended, by phase and outcome.",
		}, []string{"phase", "outcome"}),
		phaseDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sagad_phase_duration_seconds",
			Help:    "Time one phase run took, from taking the message to recording the transition, by phase and outcome.",
			Buckets: phaseBuckets,
		}, []string{"phase", "outcome"}),
		verdicts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_review_verdicts_total",
			Help: "Review cycles completed, by verdict (after Rule 15).",
		}, []string{"verdict"}),
		ruleViolations: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_rule_violations_total",
			Help: "Constitution rule violations found, by rule number.",
		}, []string{"rule"}),
		compSteps: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sagad_composition_steps",
			Help:    "Steps per composition run, observed when sagad starts the run.",
			Buckets: compositionStepBuckets,
		}),
		lockWait: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sagad_lock_wait_seconds",
			Help:    "Time EXECUTION waited to acquire a capsule's resource locks.",
			Buckets: lockBuckets,
		}),
		lockContention: f.NewCounter(prometheus.CounterOpts{
			Name: "sagad_lock_contention_total",
			Help: "Lock acquisitions that found a lock held by another capsule.",
		}),
		calls: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_agent_calls_total",
			Help: "Executor and reviewer calls, by kind and result.",
		}, []string{"kind", "result"}),
		attempts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_agent_attempts_total",
			Help: "Executor and reviewer attempts under the failure policy, by role and result (ok, or the policy's decision on a failed attempt: retry, pause, halt).",
		}, []string{"role", "result"}),
		callDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sagad_agent_call_duration_seconds",
			Help:    "Latency of executor and reviewer calls, by kind.",
			Buckets: callBuckets,
		}, []string{"kind"}),
		redeliveries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_redeliveries_total",
			Help: "Phase messages JetStream delivered more than once, by phase.",
		}, []string{"phase"}),
		pauses: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_pauses_total",
			Help: "Capsules paused, by trigger.",
		}, []string{"trigger"}),
		resumes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_resumes_total",
			Help: "Paused capsules resumed, by the trigger they had paused on.",
		}, []string{"trigger"}),
		adminActions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_admin_actions_total",
			Help: "Operator actions sagad carried out, by action.",
		}, []string{"action"}),
		terminated: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_messages_terminated_total",
			Help: "Messages sagad terminated because they can never succeed (poison), by cause.",
		}, []string{"cause"}),
		corrupt: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_corrupt_values_total",
			Help: "Values in sagad's buckets that sagad did not write (undecodable, or not what sagad writes under their key), each counted once, by bucket.",
		}, []string{"bucket"}),
		rescued: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_capsules_rescued_total",
			Help: "Capsules in progress whose step had no message and was sent again (the rescuer), by phase.",
		}, []string{"phase"}),
		writeErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sagad_jetstream_write_errors_total",
			Help: "JetStream writes that failed (timed out, refused for lack of storage, no quorum, no connection), by kind.",
		}, []string{"kind"}),
		writesFailing: f.NewGauge(prometheus.GaugeOpts{
			Name: "sagad_jetstream_writes_failing",
			Help: "1 while JetStream writes have been failing for longer than --unhealthy-after (/readyz fails then), else 0.",
		}),
		busyRedeliver: f.NewCounter(prometheus.CounterOpts{
			Name: "sagad_redeliveries_in_flight_total",
			Help: "Redeliveries of a message whose first delivery this sagad was still handling: handed back with a nak, not handled twice.",
		}),
	}
	m.spend = newSpend(f)
	m.now, m.since = time.Now, time.Now()
	m.phaseLat = newLatencies((int(capsule.NumPhases)+1)*(len(Outcomes)+1), func(i int) *latency {
		p, o := phaseOutcomeLabels(i)
		return newLatency(m.transitions.WithLabelValues(p, o), m.phaseDuration.WithLabelValues(p, o), phaseBuckets)
	})
	m.callLat = newLatencies(len(CallKinds)+1, func(i int) *latency {
		return newLatency(nil, m.callDuration.WithLabelValues(callKindLabel(i)), callBuckets)
	})
	m.init()
	m.awaitingOperator.Store(-1)
	return m
}

// init creates every series of a closed label set at zero.
func (m *Metrics) init() {
	for _, c := range capsule.HaltCodes {
		m.halted.WithLabelValues(string(c))
	}
	m.halted.WithLabelValues(Other)
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		for _, o := range Outcomes {
			m.transitions.WithLabelValues(p.String(), o)
		}
		// The common path only: other outcomes' buckets appear on first use.
		m.phaseDuration.WithLabelValues(p.String(), capsule.OutcomePassed)
		m.redeliveries.WithLabelValues(p.String())
	}
	for _, v := range Verdicts {
		m.verdicts.WithLabelValues(string(v))
	}
	for _, r := range rules.Constitution {
		m.ruleViolations.WithLabelValues(strconv.Itoa(r.Number))
	}
	for _, k := range CallKinds {
		for _, r := range CallResults {
			m.calls.WithLabelValues(k, r)
		}
		m.callDuration.WithLabelValues(k)
		for _, r := range AttemptResults {
			m.attempts.WithLabelValues(k, r)
		}
	}
	for _, t := range Triggers {
		m.pauses.WithLabelValues(TriggerLabel(t))
		m.resumes.WithLabelValues(TriggerLabel(t))
	}
	for _, a := range AdminActions {
		m.adminActions.WithLabelValues(a)
	}
	for _, r := range TermReasons {
		m.terminated.WithLabelValues(r)
	}
	for _, b := range corrupt.Buckets {
		m.corrupt.WithLabelValues(b)
	}
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		m.rescued.WithLabelValues(PhaseLabel(p))
	}
	for _, k := range WriteErrorKinds {
		m.writeErrors.WithLabelValues(k)
	}
}

// Received counts a capsule RECEPTION took in for the first time.
func (m *Metrics) Received() {
	if m == nil {
		return
	}
	m.received.Inc()
}

// Transition records that a run of phase ended with outcome after d.
// outcome is one of [Outcomes].
func (m *Metrics) Transition(phase capsule.Phase, outcome string, d time.Duration) {
	m.TransitionTraced(phase, outcome, d, "")
}

// TransitionTraced is [Metrics.Transition] with the capsule's trace id (32
// hex digits), kept as the duration's exemplar so a slow bucket links to
// a trace. An id that is not one is left out.
func (m *Metrics) TransitionTraced(phase capsule.Phase, outcome string, d time.Duration, traceID string) {
	if m == nil {
		return
	}
	l := m.phaseLat.at(phaseOutcome(phase, outcome))
	l.count.Inc()
	l.observe(seconds(d), traceID, m.now, m.since)
}

// Ended counts a capsule that reached a terminal state; for Halted, by the
// code of reason. Other states are ignored.
func (m *Metrics) Ended(state capsule.State, reason capsule.HaltReason) {
	if m == nil {
		return
	}
	switch state {
	case capsule.Completed:
		m.completed.Inc()
	case capsule.Halted:
		m.halted.WithLabelValues(HaltLabel(reason.Code)).Inc()
	case capsule.Cancelled:
		m.cancelled.Inc()
	}
}

// ReviewCycle counts a review cycle that ended with verdict.
func (m *Metrics) ReviewCycle(verdict capsule.Verdict) {
	if m == nil {
		return
	}
	m.verdicts.WithLabelValues(oneOf(string(verdict), Verdicts)).Inc()
}

// RuleViolations counts one violation of each rule number in rules.
func (m *Metrics) RuleViolations(rules []int) {
	if m == nil {
		return
	}
	for _, n := range rules {
		m.ruleViolations.WithLabelValues(RuleLabel(n)).Inc()
	}
}

// LockWait records how long acquiring a capsule's locks took, and whether
// another capsule held one of them.
func (m *Metrics) LockWait(d time.Duration, contended bool) {
	if m == nil {
		return
	}
	m.lockWait.Observe(seconds(d))
	if contended {
		m.lockContention.Inc()
	}
}

// Call records one executor or reviewer call: kind is [KindExecutor] or
// [KindReviewer], result one of [CallResults], d its latency.
func (m *Metrics) Call(kind, result string, d time.Duration) {
	m.CallTraced(kind, result, d, "")
}

// CallTraced is [Metrics.Call] with the trace id of the call's trace,
// kept as the latency's exemplar.
func (m *Metrics) CallTraced(kind, result string, d time.Duration, traceID string) {
	if m == nil {
		return
	}
	k := callKind(kind)
	m.calls.WithLabelValues(callKindLabel(k), oneOf(result, CallResults)).Inc()
	m.callLat.at(k).observe(seconds(d), traceID, m.now, m.since)
}

// ExemplarTraceID is the exemplar label naming a trace, the one Grafana
// and Prometheus look for.
const ExemplarTraceID = "trace_id"

func validTraceID(s string) bool {
	if len(s) != 32 || s == "00000000000000000000000000000000" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Attempt counts one attempt of an agent call under the failure policy:
// role is [KindExecutor] or [KindReviewer], result one of [AttemptResults].
func (m *Metrics) Attempt(role, result string) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(oneOf(role, CallKinds), oneOf(result, AttemptResults)).Inc()
}

// Redelivered counts a phase message JetStream delivered again.
func (m *Metrics) Redelivered(phase capsule.Phase) {
	if m == nil {
		return
	}
	m.redeliveries.WithLabelValues(PhaseLabel(phase)).Inc()
}

// Paused counts a capsule paused with trigger.
func (m *Metrics) Paused(trigger capsule.Trigger) {
	if m == nil {
		return
	}
	m.pauses.WithLabelValues(TriggerLabel(trigger)).Inc()
}

// Resumed counts a capsule resumed from a pause with trigger.
func (m *Metrics) Resumed(trigger capsule.Trigger) {
	if m == nil {
		return
	}
	m.resumes.WithLabelValues(TriggerLabel(trigger)).Inc()
}

// AdminAction counts an operator action, one of [AdminActions].
func (m *Metrics) AdminAction(action string) {
	if m == nil {
		return
	}
	m.adminActions.WithLabelValues(oneOf(action, AdminActions)).Inc()
}

// PhaseLabel is the phase label value of p: its PIPELINE §3 name, or [Other].
func PhaseLabel(p capsule.Phase) string {
	if !p.Valid() {
		return Other
	}
	return p.String()
}

// HaltLabel is the reason label value of a halt code: the code when it is
// one of capsule.HaltCodes, [Other] otherwise.
func HaltLabel(c capsule.HaltCode) string { return oneOf(string(c), capsule.HaltCodes) }

// TriggerLabel is the trigger label value of t (its Metric in
// capsule.TriggerTable), or [Other].
func TriggerLabel(t capsule.Trigger) string {
	if l := t.Info().Metric; l != "" {
		return l
	}
	return Other
}

// RuleLabel is the rule label value of rule number n: the number when the
// constitution has that rule, [Other] otherwise.
func RuleLabel(n int) string {
	if _, ok := rules.Lookup(n); !ok {
		return Other
	}
	return strconv.Itoa(n)
}

// oneOf returns v when it is in set, Other otherwise.
func oneOf[S ~string](v string, set []S) string {
	if slices.Contains(set, S(v)) {
		return v
	}
	return Other
}

// seconds converts d for a histogram; a negative duration (a clock step)
// counts as zero.
func seconds(d time.Duration) float64 { return max(d, 0).Seconds() }

// Terminated counts a message terminated for reason, one of [TermReasons].
func (m *Metrics) Terminated(reason string) {
	if m == nil {
		return
	}
	m.terminated.WithLabelValues(oneOf(reason, TermReasons)).Inc()
}

// Corrupt counts a value of bucket (one of [corrupt.Buckets]) that sagad
// did not write; [corrupt.Reporter] calls it once per value.
func (m *Metrics) Corrupt(bucket string) {
	if m == nil {
		return
	}
	m.corrupt.WithLabelValues(oneOf(bucket, corrupt.Buckets)).Inc()
}

// Rescued counts a capsule whose step the rescuer sent again.
func (m *Metrics) Rescued(phase capsule.Phase) {
	if m == nil {
		return
	}
	m.rescued.WithLabelValues(PhaseLabel(phase)).Inc()
}

// CompositionStarted observes a composition run of steps steps that sagad
// just started (once per run: a document sent again to the same run is
// not a new start).
func (m *Metrics) CompositionStarted(steps int) {
	if m == nil {
		return
	}
	m.compSteps.Observe(float64(steps))
}

// AwaitingOperator records n, the capsules waiting for an operator decision
// (state waiting_for_operator, the operator gate after REVIEW) as the
// rescuer (package maintenance) last counted them from the checkpoints.
// The JetStream collector reports it as
// sagad_capsules_paused{trigger="operator_gate"}.
func (m *Metrics) AwaitingOperator(n int) {
	if m == nil {
		return
	}
	m.awaitingOperator.Store(int64(n))
}

// AwaitingOperatorCount returns what [Metrics.AwaitingOperator] last
// recorded; ok is false before it first did (no rescuer runs, or it has not
// looked yet).
func (m *Metrics) AwaitingOperatorCount() (n int, ok bool) {
	if m == nil {
		return 0, false
	}
	v := m.awaitingOperator.Load()
	return int(v), v >= 0
}

// WriteFailed counts a failed JetStream write of kind, one of
// [WriteErrorKinds].
func (m *Metrics) WriteFailed(kind string) {
	if m == nil {
		return
	}
	m.writeErrors.WithLabelValues(oneOf(kind, WriteErrorKinds)).Inc()
}

// WritesFailing sets whether JetStream writes have been failing for longer
// than sagad tolerates.
func (m *Metrics) WritesFailing(failing bool) {
	if m == nil {
		return
	}
	v := 0.0
	if failing {
		v = 1
	}
	m.writesFailing.Set(v)
}

// RedeliveredInFlight counts a redelivery that found its message's first
// delivery still being handled in this process.
func (m *Metrics) RedeliveredInFlight() {
	if m == nil {
		return
	}
	m.busyRedeliver.Inc()
}
