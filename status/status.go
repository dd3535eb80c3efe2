package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/store"
)

// Reader reads capsules' checkpoints and events: their status, the list,
// their history, and a wait for one to settle.
type Reader struct {
	js          jetstream.JetStream
	checkpoints *store.Checkpoints
	families    *budget.Tracker
}

// NewReader returns a reader of checkpoints through cps and of events on js.
func NewReader(js jetstream.JetStream, cps *store.Checkpoints) *Reader {
	return &Reader{js: js, checkpoints: cps}
}

// Status is what `sagactl status -o json` prints for one capsule.
type Status struct {
	CapsuleID string `json:"capsule_id"`
	Key       string `json:"key"`
	// Run is the capsule's run: 1, then 2, 3, … for each replay.
	Run        int           `json:"run"`
	State      capsule.State `json:"state"`
	Phase      int           `json:"phase"`
	PhaseName  string        `json:"phase_name"`
	CyclesUsed int           `json:"cycles_used"`
	HaltReason string        `json:"halt_reason"`
	Progress   int           `json:"progress"`
	TraceID    string        `json:"trace_id"`
	// TraceParent is the W3C traceparent of the capsule's root span
	// (capsule.Checkpoint.TraceParent); its trace id is the one to look up
	// in an OpenTelemetry backend. Empty for capsules received before
	// sagad traced.
	TraceParent string `json:"trace_parent,omitempty"`
	// Producer is the producer account the capsule came from
	// ([capsule.Checkpoint.Producer]); absent for sagad's own intake.
	Producer string `json:"producer,omitempty"`
	// Constitution is the version of the constitution in force where the
	// capsule was received, with its parameters' digest
	// ([capsule.Checkpoint.Constitution]).
	Constitution string `json:"constitution,omitempty"`
	// Reviewer is who reviewed the latest cycle: the capsule's declared
	// reviewer, or sagad's default_reviewer when it declared none. Empty
	// before the first review.
	Reviewer     string            `json:"reviewer,omitempty"`
	BudgetUsed   capsule.Usage     `json:"budget_used"`
	ArtifactRefs []string          `json:"artifact_refs"`
	Findings     []capsule.Finding `json:"findings"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
	History      []HistoryEntry    `json:"history"`
	// WaitingOn says what a waiting capsule waits for ("dependencies" or
	// "wave_capacity"), and Pending which of them it still waits for (the
	// dependency ids, or the wave id).
	WaitingOn string   `json:"waiting_on,omitempty"`
	Pending   []string `json:"pending,omitempty"`
	// AwaitingExternal: paused on work an executor accepted, which reports
	// by itself ([capsule.CheckpointState.AwaitsExternal]); no person is
	// needed.
	AwaitingExternal bool `json:"awaiting_external,omitempty"`
	// Parent is the capsule whose executor call published this one
	// (parent_capsule_id, verified at RECEPTION), Depth how many parents
	// are above it; both absent for a root capsule.
	Parent string `json:"parent,omitempty"`
	Depth  int    `json:"depth,omitempty"`
	// Children are the capsules this one's executor calls published, in
	// the order they were received (the first budget.MaxChildrenListed;
	// ChildrenMore counts the others), and ChildrenUsed what they and
	// their descendants spent, which counts against this capsule's caps.
	// Absent for a capsule without children.
	Children     []string       `json:"children,omitempty"`
	ChildrenMore int            `json:"children_more,omitempty"`
	ChildrenUsed *capsule.Usage `json:"children_used,omitempty"`
	// Pause says why a paused capsule (or one waiting for an operator)
	// stopped: its trigger, the reason given, who paused it and when.
	// Absent in every other state.
	Pause *Pause `json:"pause,omitempty"`
	// Call is the agent call running for the capsule in the sagad that
	// answered, as its stream shows it so far ([Calls]); absent when that
	// sagad runs none for it (a call runs in one sagad only).
	Call *Call `json:"call,omitempty"`
	// Questions are its agent's open questions (trigger agent_query),
	// oldest first: `sagactl resume ID --answer TEXT` answers the first.
	Questions []Question `json:"questions,omitempty"`
	// Attempts are the failed executor and reviewer calls, oldest first
	// (the newest [capsule.MaxAttemptLog]): attempt, exit code and what the
	// failure policy decided. Absent when no call failed.
	Attempts []capsule.FailedAttempt `json:"failed_attempts,omitempty"`
	// Said is what people said to the capsule, oldest first: the answers
	// of their resumes and the rationales of their revises and rejects,
	// each with who and when ([SaidOf]). Absent when no one said anything.
	Said []Said `json:"said,omitempty"`
}

// Kinds of [Said].
const (
	SaidAnswer = "answer" // sagactl resume --answer
	SaidRevise = "revise" // decide revise --rationale
	SaidReject = "reject" // decide reject --rationale
	SaidAccept = "accept" // decide accept over a verdict other than APPROVED
)

// Said is one thing a person said to a capsule.
type Said struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	By   string `json:"by,omitempty"`
	// Cycle is the cycle a decision settled; absent for an answer.
	Cycle int       `json:"cycle,omitempty"`
	At    time.Time `json:"at"`
}

// SaidOf returns what people said to cp, oldest first, from its checkpoint:
// the answers log and the reviews operators recorded.
func SaidOf(cp *capsule.Checkpoint) []Said {
	var out []Said
	for _, a := range cp.State.Answers {
		out = append(out, Said{Kind: SaidAnswer, Text: a.Text, By: a.By, At: a.At})
	}
	for _, r := range cp.State.Reviews {
		by, ok := strings.CutPrefix(r.ReviewerID, capsule.OperatorReviewerPrefix)
		if !ok || len(r.Findings) == 0 {
			continue
		}
		msg := r.Findings[len(r.Findings)-1].Message
		said := Said{Text: msg, By: by, Cycle: r.Cycle, At: r.At}
		switch r.Verdict {
		case capsule.ChangesRequested:
			said.Kind, said.Text = SaidRevise, strings.TrimPrefix(msg, machine.RevisionPrefix)
		case capsule.Rejected:
			said.Kind, said.Text = SaidReject, strings.TrimPrefix(msg, machine.RejectionPrefix)
		default:
			said.Kind = SaidAccept
		}
		out = append(out, said)
	}
	slices.SortStableFunc(out, func(a, b Said) int { return a.At.Compare(b.At) })
	return out
}

// Pause is why a capsule is paused or waits for an operator.
type Pause struct {
	Trigger capsule.Trigger `json:"trigger"`
	Reason  string          `json:"reason,omitempty"`
	By      string          `json:"by,omitempty"`
	At      time.Time       `json:"at"`
}

// Question is an agent's open question in a [Status] (its reply subject is
// sagad's to use, not shown).
type Question struct {
	ID     string    `json:"id"`
	Agent  string    `json:"agent,omitempty"`
	Prompt string    `json:"prompt"`
	Phase  int       `json:"phase"`
	Cycle  int       `json:"cycle"`
	At     time.Time `json:"at"`
}

// QuestionsOf lists the open questions of st, oldest first.
func QuestionsOf(st capsule.CheckpointState) []Question {
	var out []Question
	for _, q := range st.AgentQueries {
		out = append(out, Question{ID: q.ID, Agent: q.Agent, Prompt: q.Prompt, Phase: int(q.Phase), Cycle: q.Cycle, At: q.At})
	}
	return out
}

// HistoryEntry is one phase transition in a [Status].
type HistoryEntry struct {
	Phase     int    `json:"phase"`
	PhaseName string `json:"phase_name"`
	Cycle     int    `json:"cycle"`
	Outcome   string `json:"outcome"`
	Detail    string `json:"detail,omitempty"`
	// Run is the run the transition belongs to (1, 2, …).
	Run int       `json:"run"`
	At  time.Time `json:"at"`
}

// Of renders a checkpoint as a [Status].
func Of(cp *capsule.Checkpoint) Status {
	s := Status{
		CapsuleID:    cp.CapsuleID,
		Key:          cp.Key,
		Run:          cp.RunNumber(),
		State:        cp.State.Status,
		Phase:        int(cp.State.Phase),
		PhaseName:    cp.State.Phase.String(),
		CyclesUsed:   cp.State.Cycle,
		HaltReason:   cp.State.HaltReason,
		Progress:     cp.State.Progress,
		TraceID:      cp.TraceID,
		TraceParent:  cp.TraceParent,
		Producer:     cp.Producer,
		Constitution: cp.Constitution,
		BudgetUsed:   cp.State.BudgetUsed,
		ArtifactRefs: append([]string{}, cp.State.ArtifactRefs...),
		Findings:     append([]capsule.Finding{}, cp.State.Findings...),
		CreatedAt:    cp.CreatedAt,
		UpdatedAt:    cp.UpdatedAt,
		History:      make([]HistoryEntry, 0, len(cp.History)),

		AwaitingExternal: cp.State.AwaitsExternal(),
		Parent:           cp.Parent,
		Depth:            cp.Depth,
	}
	if n := len(cp.State.Reviews); n > 0 {
		s.Reviewer = cp.State.Reviews[n-1].ReviewerID
	}
	for _, t := range cp.History {
		s.History = append(s.History, HistoryEntry{Phase: int(t.Phase), PhaseName: t.PhaseName, Cycle: t.Cycle, Outcome: t.Outcome, Detail: t.Detail, Run: max(t.Run, 1), At: t.At})
	}
	if p := cp.State.Pause; p != nil && (cp.State.Status == capsule.Paused || cp.State.Status == capsule.WaitingForOperator) {
		s.Pause = &Pause{Trigger: p.Trigger, Reason: p.Reason, By: p.By, At: p.At}
	}
	s.Questions = QuestionsOf(cp.State)
	if len(cp.State.AttemptLog) > 0 {
		s.Attempts = append([]capsule.FailedAttempt{}, cp.State.AttemptLog...)
	}
	s.Said = SaidOf(cp)
	if cp.State.Status == capsule.Waiting {
		s.WaitingOn = string(capsule.TriggerDependencies)
		if i, ok := cp.State.ParkedBy(); ok && i.State == capsule.Waiting {
			s.WaitingOn = string(i.Trigger)
		}
		s.Pending = append([]string{}, cp.State.WaitingFor...)
	}
	return s
}

// Checkpoint returns the checkpoint of a capsule id (or key).
func (c *Reader) Checkpoint(ctx context.Context, id string) (*capsule.Checkpoint, error) {
	return c.checkpoints.Find(ctx, id)
}

// Status returns the status of a capsule id (or key).
func (c *Reader) Status(ctx context.Context, id string) (Status, error) {
	cp, err := c.checkpoints.Find(ctx, id)
	if err != nil {
		return Status{}, err
	}
	s := Of(cp)
	if c.families != nil {
		// Children are listed in the parent's family record (package
		// budget), which also totals their spend: one read, not a scan
		// of every checkpoint for those naming this one.
		f, ok, err := c.families.FamilyOf(ctx, cp.Key)
		if err != nil {
			return Status{}, err
		}
		if ok {
			s.Children, s.ChildrenMore, s.ChildrenUsed = f.Children, f.More, &f.Used
		}
	}
	return s, nil
}

// WithFamilies makes [Reader.Status] name a capsule's children from their
// family records in t.
func (c *Reader) WithFamilies(t *budget.Tracker) *Reader {
	c.families = t
	return c
}

// List returns the status of every capsule, oldest first; state filters when
// non-empty.
func (c *Reader) List(ctx context.Context, state capsule.State) ([]Status, error) {
	return c.ListWhere(ctx, func(cp *capsule.Checkpoint) bool { return state == "" || cp.State.Status == state })
}

// ListWhere returns the status of every capsule whose checkpoint keep
// accepts, oldest first.
func (c *Reader) ListWhere(ctx context.Context, keep func(cp *capsule.Checkpoint) bool) ([]Status, error) {
	all, err := c.checkpoints.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(all))
	for _, cp := range all {
		if keep(cp) {
			out = append(out, Of(cp))
		}
	}
	return out, nil
}

// Wait blocks until the capsule ends or needs a person (or ctx ends) and
// returns its status; a capsule waiting for its dependencies, or paused on
// accepted external work ([capsule.CheckpointState.AwaitsExternal]), goes
// on by itself and Wait waits on. It watches the checkpoint key rather than
// polling.
func (c *Reader) Wait(ctx context.Context, id string) (Status, error) {
	id = canonical(id)
	key := id
	if cp, err := c.checkpoints.Find(ctx, id); err == nil {
		key = cp.Key
		if settled(cp) {
			return Of(cp), nil
		}
	} else if !errors.Is(err, store.ErrNotFound) || !store.ValidKey(id) {
		return Status{}, err
	}
	w, err := c.checkpoints.Watch(ctx, key)
	if err != nil {
		return Status{}, fmt.Errorf("watch %s: %w", key, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return Status{}, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return Status{}, errors.New("watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			cp := new(capsule.Checkpoint)
			if err := json.Unmarshal(e.Value(), cp); err != nil {
				return Status{}, err
			}
			if settled(cp) {
				return Of(cp), nil
			}
		}
	}
}

// settled: the capsule has ended or needs a person, what [Reader.Wait]
// waits for.
func settled(cp *capsule.Checkpoint) bool {
	return !goesOn(cp.State.Status) && !cp.State.AwaitsExternal()
}

// History returns the lifecycle events of a capsule id (or key) in time
// order, de-duplicated by event id: the events of its transitions, derived
// from its checkpoint, merged with those on the events stream.
func (c *Reader) History(ctx context.Context, id string) ([]capsule.Event, error) {
	id = canonical(id)
	key := id
	var derived []capsule.Event
	if cp, err := c.checkpoints.Find(ctx, id); err == nil {
		key = cp.Key
		derived = machine.CheckpointEvents(cp)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	stream, err := readEvents(ctx, c.js, store.EventSubject(key))
	if err != nil {
		return nil, err
	}
	return MergeEvents(derived, stream), nil
}

// MergeEvents merges two event lists, each in order, into one ordered by
// time (a transition's events keep their order), dropping repeated ids.
func MergeEvents(a, b []capsule.Event) []capsule.Event {
	out := make([]capsule.Event, 0, len(a)+len(b))
	seen := make(map[string]bool, len(a)+len(b))
	add := func(ev capsule.Event) {
		if ev.ID != "" && seen[ev.ID] {
			return
		}
		seen[ev.ID] = true
		out = append(out, ev)
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && !b[j].At.Before(a[i].At)) {
			add(a[i])
			i++
		} else {
			add(b[j])
			j++
		}
	}
	return out
}

// readEvents reads every event on subject so far with an ordered consumer.
func readEvents(ctx context.Context, js jetstream.JetStream, subject string) ([]capsule.Event, error) {
	cons, err := js.OrderedConsumer(ctx, store.EventsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	// sagad reads histories for every operator who asks: each read's
	// consumer goes when the read ends, not after its inactivity threshold.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if ci := cons.CachedInfo(); ci != nil {
			_ = js.DeleteConsumer(dctx, store.EventsStream, ci.Name)
		}
	}()
	pending := info.NumPending
	var out []capsule.Event
	seen := map[string]bool{}
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			evs, err := capsule.DecodeEvents(m.Data())
			if err != nil {
				continue // not ours to judge
			}
			for _, ev := range evs {
				if !seen[ev.ID] {
					seen[ev.ID] = true
					out = append(out, ev)
				}
			}
		}
		if batch.Error() != nil {
			return nil, fmt.Errorf("events: %w", batch.Error())
		}
		if n == 0 {
			break
		}
		pending -= uint64(min(uint64(n), pending))
	}
	return out, nil
}

// canonical is id in the one form sagad keys capsules by (UUIDs in lower
// case, ULIDs in upper case); anything else is left as it is.
func canonical(id string) string {
	if cid, ok := capsule.CanonicalID(id); ok {
		return cid
	}
	return id
}

// goesOn reports whether a capsule in state s goes on by itself: in
// progress, or waiting for its dependencies.
func goesOn(s capsule.State) bool { return s == capsule.InProgress || s == capsule.Waiting }

// Settled reports whether the capsule of s has ended or needs a person,
// what [Reader.Wait] waits for.
func Settled(s Status) bool {
	return !goesOn(s.State) && !s.AwaitingExternal
}
