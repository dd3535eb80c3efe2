package capsule

// Trigger is why a capsule parks: a pause (PIPELINE §5's continuation
// triggers), a wait for something sagad watches, or the operator gate.
type Trigger string

// Pause and wait triggers. What each one does is its row of [TriggerTable].
const (
	TriggerBudgetWarning       Trigger = "budget_warning"
	TriggerDeadlineApproaching Trigger = "deadline_approaching"
	TriggerBlockedExternal     Trigger = "blocked_external"
	TriggerLockContention      Trigger = "lock_contention"
	TriggerOperatorManual      Trigger = "operator_manual"
	// TriggerOperatorGate is not a continuation trigger: it marks a capsule
	// waiting_for_operator after REVIEW (review.operator_gate).
	TriggerOperatorGate Trigger = "operator_gate"
	// TriggerDependencies marks a capsule waiting for its depends_on to
	// complete (state waiting); its continuation lets the sweeper find it.
	TriggerDependencies Trigger = "dependencies"
	// TriggerWaveCapacity marks a capsule waiting, at AUTOMATED_GATES, for
	// its wave to have room for its caps (state waiting); the sweeper
	// resumes it when capacity frees or the wave's cap is raised.
	TriggerWaveCapacity Trigger = "wave_capacity"
	// TriggerWaveTooSmall marks a capsule waiting, at AUTOMATED_GATES,
	// whose caps exceed its wave's whole cap: no capsule ending makes room
	// for it, only a person (a raised cap, or a cancel). The sweeper still
	// resumes it once the cap is raised.
	TriggerWaveTooSmall Trigger = "wave_too_small"
	// TriggerCompositionGate holds a composition step declared with gate
	// "operator" (chain.gate) at AUTOMATED_GATES, before anything is
	// spent, until a person decides (sagactl composition decide). Once:
	// accepted, it goes on and is not held again.
	TriggerCompositionGate Trigger = "composition_gate"
	// TriggerAgentQuery marks a capsule whose agent asked a person a
	// question during its call (a query chunk of the Agent Protocol for
	// NATS). The call goes on meanwhile: the phase keeps its claim, and its
	// own decision lifts the pause ([TriggerInfo.CallRuns]).
	TriggerAgentQuery Trigger = "agent_query"
	// TriggerParentCapacity marks a child capsule waiting, at
	// AUTOMATED_GATES, for room in its parent's caps (sagad configured to
	// wait rather than halt: --child-budget wait); the sweeper resumes it
	// when a sibling's end frees room. It is listed in pending: a person
	// may cancel it, or raise the parent's caps.
	TriggerParentCapacity Trigger = "parent_capacity"
)

// Triggers lists the five continuation triggers of PIPELINE §5.
var Triggers = []Trigger{
	TriggerBudgetWarning, TriggerDeadlineApproaching, TriggerBlockedExternal, TriggerLockContention, TriggerOperatorManual,
}

// Resumer is who takes a parked capsule on again.
type Resumer string

// Resumers.
const (
	// ResumerPerson: sagactl resume (or decide, at the operator gate). The
	// capsule is in sagactl pending and the console's inbox.
	ResumerPerson Resumer = "person"
	// ResumerSweeper: sagad's sweeper, when what the capsule waits for is
	// there ([Watch] says what it looks at).
	ResumerSweeper Resumer = "sweeper"
)

// Watch is what the sweeper looks at for a parked capsule.
type Watch string

// Watches.
const (
	// WatchNone: the sweeper leaves the capsule alone.
	WatchNone Watch = ""
	// WatchLocks: resume once the capsule's resource locks are free.
	WatchLocks Watch = "locks"
	// WatchExternal: work an executor accepted ([CheckpointState.AwaitsExternal]):
	// renew the capsule's locks, halt it executor_failed when the result is
	// overdue.
	WatchExternal Watch = "external"
	// WatchDependencies: resume once every depends_on completed, halt on
	// one that failed or stays unknown.
	WatchDependencies Watch = "dependencies"
	// WatchWave: resume, oldest first, while the wave has room; halt
	// wave_closed when it is closed.
	WatchWave Watch = "wave"
	// WatchParent: resume once the parent's caps have room for the
	// child's (AUTOMATED_GATES then reserves), or the parent ended (it
	// then halts parent_refused).
	WatchParent Watch = "parent"
)

// TriggerInfo is what a trigger does to a capsule, and who reads it: the
// machine (state, once, operator, locks), admin's pending list and the
// console's inbox (resumer), the sweeper (watch), the emitter (event,
// continuation), the metrics (label), and the tests that hold the JSON
// schemas' enums and docs/CAPSULES.md's table to [TriggerTable].
type TriggerInfo struct {
	Trigger Trigger
	// State is the state the trigger puts a capsule in.
	State State
	// Once: the trigger fires at most once per capsule (it is remembered in
	// CheckpointState.Warned), until a resume lifts its cause.
	Once bool
	// Resumer is who takes the capsule on again.
	Resumer Resumer
	// Watch is what the sweeper looks at for the capsule.
	Watch Watch
	// Operator: a person sets it (sagactl pause). It stands over sagad's
	// own reasons to park, and a phase that was running when it was set
	// may still record its outcome.
	Operator bool
	// KeepsLocks: a capsule parked with it at EXECUTION keeps its resource
	// locks (its executor is still at work); any other pause there
	// releases them.
	KeepsLocks bool
	// Event is the kind of the event the parking emits.
	Event EventKind
	// Continuation: a record is kept in SAGA_CONTINUATIONS while the
	// capsule is parked, which the sweeper and the paused gauge read.
	Continuation bool
	// Metric is the trigger label value of the pause, resume and paused
	// metrics.
	Metric string
	// CallRuns: the capsule is parked while its phase's agent call still
	// runs (its claim holds). The phase's decision, a failed attempt or a
	// new claim after the holder died is still accepted, and ends the
	// pause; an operator's resume, pause and accept are refused with
	// PauseRefused (answer it instead).
	CallRuns bool
	// PauseRefused is why an operator's pause is refused for a capsule
	// parked with it, before anything is spent (state waiting only).
	PauseRefused string
	// Description says in one line when the trigger fires, in Markdown
	// (the trigger table of docs/CAPSULES.md shows it).
	Description string
}

// TriggerTable is every pause and wait trigger, in the order metrics and
// README list them.
//
// Adding a trigger touches this table (a constant and a row; the tests then
// ask for its value in the JSON schemas' enums that list triggers and a row
// in the trigger table of docs/CAPSULES.md, which they print) and the code that fires it:
// a phase returning a Park decision with it, or an admin action. The
// machine, the pending list, the console, the sweeper, the emitter and the
// metrics read the row. Only a new [Watch] needs code in the sweeper.
var TriggerTable = []TriggerInfo{
	{
		Trigger: TriggerBudgetWarning, State: Paused, Once: true, Resumer: ResumerPerson,
		Event: EventPaused, Continuation: true, Metric: "budget_warning",
		Description: "over 75 % of a token or dollar cap used",
	},
	{
		Trigger: TriggerDeadlineApproaching, State: Paused, Once: true, Resumer: ResumerPerson,
		Event: EventPaused, Continuation: true, Metric: "deadline_approaching",
		Description: "under 5 minutes left before the deadline",
	},
	{
		Trigger: TriggerBlockedExternal, State: Paused, Resumer: ResumerPerson, Watch: WatchExternal, KeepsLocks: true,
		Event: EventPaused, Continuation: true, Metric: "blocked_external",
		Description: "an executor accepted long work (it goes on when the result comes), or a worker needs a human",
	},
	{
		Trigger: TriggerLockContention, State: Paused, Resumer: ResumerSweeper, Watch: WatchLocks,
		Event: EventPaused, Continuation: true, Metric: "lock_contention",
		Description: "its locks held by others for over `--lock-wait` (60 s); it goes on when they are free",
	},
	{
		Trigger: TriggerOperatorManual, State: Paused, Resumer: ResumerPerson, Operator: true,
		Event: EventPaused, Continuation: true, Metric: "operator_manual",
		Description: "someone ran `sagactl pause`",
	},
	{
		Trigger: TriggerOperatorGate, State: WaitingForOperator, Resumer: ResumerPerson,
		Event: EventWaiting, Continuation: true, Metric: "operator_gate",
		Description: "`review.operator_gate`: a review's verdict waits for `sagactl decide`",
	},
	{
		Trigger: TriggerDependencies, State: Waiting, Resumer: ResumerSweeper, Watch: WatchDependencies,
		Event: EventDependencyWait, Continuation: true, Metric: "dependencies",
		PauseRefused: "it waits for its dependencies, before anything is spent: cancel it, or let them finish",
		Description:  "a `depends_on` has not completed",
	},
	{
		Trigger: TriggerWaveCapacity, State: Waiting, Resumer: ResumerSweeper, Watch: WatchWave,
		Event: EventWaveWait, Continuation: true, Metric: "wave_capacity",
		PauseRefused: "it waits for room in its wave, before anything is spent: cancel it, or raise the wave's cap",
		Description:  "its wave has no room for its caps",
	},
	{
		Trigger: TriggerWaveTooSmall, State: Waiting, Resumer: ResumerPerson, Watch: WatchWave,
		Event: EventWaveWait, Continuation: true, Metric: "wave_too_small",
		PauseRefused: "its caps exceed its wave's whole cap: raise the wave's cap, or cancel it",
		Description:  "its caps exceed its wave's whole cap: it waits for a person to raise the cap (it then goes on) or cancel it",
	},
	{
		Trigger: TriggerCompositionGate, State: Paused, Once: true, Resumer: ResumerPerson,
		Event: EventPaused, Continuation: true, Metric: "composition_gate",
		Description: "a composition step with `gate: \"operator\"`: it waits, before anything is spent, for `sagactl composition decide`",
	},
	{
		Trigger: TriggerAgentQuery, State: Paused, Resumer: ResumerPerson, KeepsLocks: true, CallRuns: true,
		Event: EventAgentQuery, Continuation: true, Metric: "agent_query",
		PauseRefused: "its agent asked a question and waits for the answer: sagactl resume ID --answer TEXT, or cancel it",
		Description:  "an agent asked a question during its call (a `query` chunk): the call goes on while it waits for `sagactl resume ID --answer TEXT`",
	},
	{
		Trigger: TriggerParentCapacity, State: Waiting, Resumer: ResumerPerson, Watch: WatchParent,
		Event: EventFamilyWait, Continuation: true, Metric: "parent_capacity",
		PauseRefused: "it waits for room in its parent's caps, before anything is spent: cancel it, or let its siblings finish",
		Description:  "`--child-budget wait`: a child capsule's caps do not fit what its parent's caps have left; it goes on when a sibling's end frees room (docs/DELEGATION.md)",
	},
}

// Info returns t's row of [TriggerTable], or the zero TriggerInfo for a
// trigger sagad does not know.
func (t Trigger) Info() TriggerInfo {
	for k := range TriggerTable {
		if TriggerTable[k].Trigger == t {
			return TriggerTable[k]
		}
	}
	return TriggerInfo{}
}

// Known reports whether t has a row in [TriggerTable].
func (t Trigger) Known() bool { return t.Info().Trigger != "" }

// AllTriggers lists every trigger of [TriggerTable], in its order.
func AllTriggers() []Trigger {
	out := make([]Trigger, len(TriggerTable))
	for i, r := range TriggerTable {
		out[i] = r.Trigger
	}
	return out
}

// ParkedBy returns the row of the trigger st is parked with, and false when
// st is not parked (or with a trigger sagad does not know).
func (s *CheckpointState) ParkedBy() (TriggerInfo, bool) {
	if s.Pause == nil {
		return TriggerInfo{}, false
	}
	i := s.Pause.Trigger.Info()
	return i, i.Trigger != ""
}
