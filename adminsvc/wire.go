package adminsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
)

// Name is the micro service's name; every sagad registers under it.
const Name = "sagad-admin"

// Version is the version of the request and reply documents (micro needs a
// SemVer); a breaking change to them bumps the major.
const Version = "1.0.0"

// SubjectPrefix prefixes every endpoint's subject.
const SubjectPrefix = "saga.admin"

// Verbs name the endpoints; the subject of verb v is SubjectPrefix + "." + v.
const (
	VerbPause       = "pause"
	VerbResume      = "resume"
	VerbCancel      = "cancel"
	VerbDecide      = "decide"
	VerbPhasePause  = "phase.pause"
	VerbPhaseResume = "phase.resume"
	VerbPhaseList   = "phase.list"
	VerbPending     = "pending"
	VerbRules       = "rules"
	VerbReplay      = "replay"
	// VerbReplayPreview answers what a replay would do and does none of
	// it (sagactl replay --dry-run); it takes a replay's request.
	VerbReplayPreview = "replay.preview"
)

// Verbs lists every verb, in the order the service registers them (a new
// verb goes last: fuzz seeds name verbs by their index here).
var Verbs = append(append(append([]string{VerbPause, VerbResume, VerbCancel, VerbDecide, VerbPhasePause, VerbPhaseResume, VerbPhaseList, VerbPending, VerbRules, VerbReplay}, WaveVerbs...), VerbChain, VerbCost), append(append(ReadVerbs, CompositionVerbs...), VerbReplayPreview, VerbAgents, VerbModels)...)

// Subject returns the subject of verb, e.g. saga.admin.phase.pause.
func Subject(verb string) string { return SubjectPrefix + "." + verb }

// PauseRequest asks sagad to park a capsule with operator_manual.
type PauseRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
	// Reason is recorded in the event stream.
	Reason string `json:"reason,omitempty"`
	// By is the operator, recorded in the event stream. Required.
	By string `json:"by"`
}

// ResumeRequest asks sagad to resume a paused capsule where it stopped,
// optionally lifting the cause (see [admin.ResumeOptions]).
type ResumeRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
	// Reason is recorded in the event stream.
	Reason string `json:"reason,omitempty"`
	// By is the operator, recorded in the event stream. Required.
	By string `json:"by"`
	// Tokens and Dollars raise the capsule's caps; 0 leaves them.
	Tokens  int64   `json:"tokens,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
	// Deadline moves the capsule's deadline (RFC 3339).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Extend moves the capsule's deadline to sagad's now plus this Go
	// duration (e.g. "2h"), read by sagad's clock, not the caller's.
	// Excludes Deadline.
	Extend string `json:"extend,omitempty"`
	// Force also resumes a capsule still waiting for accepted external work.
	Force bool `json:"force,omitempty"`
	// Answer is a person's answer to the pause (an escalation's
	// resolution): recorded with By in the checkpoint, it reaches the next
	// executor call as operator_answer.
	Answer string `json:"answer,omitempty"`
}

// CancelRequest asks sagad to end a capsule cancelled.
type CancelRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
	// Reason is recorded in the history and the event stream.
	Reason string `json:"reason,omitempty"`
	// By is the operator. Required.
	By string `json:"by"`
}

// DecideRequest settles the operator gate of a capsule waiting_for_operator.
type DecideRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
	// Decision is admin.DecisionAccept, DecisionRevise or DecisionReject.
	Decision string `json:"decision"`
	// Rationale becomes the review finding of a revise (required then).
	Rationale string `json:"rationale,omitempty"`
	// By is the operator. Required.
	By string `json:"by"`
}

// ReplayRequest asks sagad to run a halted or cancelled capsule again as a
// new run of the same id (see [admin.Admin.Replay]).
type ReplayRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
	// FromPhase is the phase (0–6) the run starts at; absent: where the
	// capsule halted or was cancelled. 0 (RECEPTION) only with Capsule.
	FromPhase *int `json:"from_phase,omitempty"`
	// Capsule is a corrected capsule of the same id (a JSON object, kept
	// byte for byte), checked as RECEPTION checks an intake; the run
	// starts at RECEPTION on it.
	Capsule json.RawMessage `json:"capsule,omitempty"`
	// Dependents, absent or true, also replays the capsules halted
	// dependency_failed on this one (transitively) from AUTOMATED_GATES.
	Dependents *bool `json:"dependents,omitempty"`
	// Reason is recorded in the history and the event stream.
	Reason string `json:"reason,omitempty"`
	// By is the operator. Required.
	By string `json:"by"`
	// RequestID names this replay (1 to 64 of [A-Za-z0-9_-]): sent again,
	// the same request finishes or answers the run it started instead of
	// starting another, even after that run ended. sagad records it as
	// the checkpoint's replay_token; absent, sagad draws one.
	RequestID string `json:"request_id,omitempty"`
}

// ReplayReply answers replay: the capsule in its new run, and the
// dependents replayed with it.
type ReplayReply = admin.ReplayResult

// ReplayPreviewReply answers replay.preview: what the replay of the same
// request would do (see [admin.Admin.PreviewReplay]).
type ReplayPreviewReply = admin.ReplayPreview

// DefaultMaxReplayBytes bounds a replay request, which may carry a capsule
// (RECEPTION's own limit is 512 KiB).
const DefaultMaxReplayBytes = 640 << 10

// PhaseRequest names the phase to pause or resume for every sagad.
type PhaseRequest struct {
	// Phase is 0–6 (PIPELINE §3). Required: 0 is RECEPTION, not "unset".
	Phase int `json:"phase"`
	// By is the operator, logged by the sagad that acts (a phase pause has
	// no capsule to record it on).
	By string `json:"by,omitempty"`
	// Reason is why (`sagactl phase pause --reason R`, `pause --all
	// --reason R`): logged with By, and on a pause kept with By and the
	// time on the phase's consumer until it resumes, where `sagactl
	// pending` and the console's inbox show it.
	Reason string `json:"reason,omitempty"`
}

// PhasesReply answers phase.pause, phase.resume (the phases after the
// action) and phase.list.
type PhasesReply struct {
	Phases []admin.PhaseState `json:"phases"`
}

// PendingReply answers pending, oldest first.
type PendingReply struct {
	Items []admin.PendingItem `json:"items"`
	// Compositions are the composition runs whose verification loop
	// stopped for no_progress: a person decides on the verifier.
	Compositions []compose.WaitingLoop `json:"compositions,omitempty"`
	// Phases are the phases paused for every sagad (phase.pause): who
	// paused each, when, why, and how many messages wait in it.
	Phases []admin.PhaseState `json:"phases,omitempty"`
}

// Error codes of [ErrorReply].
const (
	CodeBadRequest = "bad_request"
	CodeNotFound   = "not_found"
	CodeRefused    = "refused"
	CodeInternal   = "internal"
)

// headerCodes are the Nats-Service-Error-Code values of each code, the
// HTTP-like numbers generic micro tools expect.
var headerCodes = map[string]string{
	CodeBadRequest: "400",
	CodeNotFound:   "404",
	CodeRefused:    "409",
	CodeInternal:   "500",
}

// ErrorReply is the body of an error answer.
type ErrorReply struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Bounds of a request.
const (
	// DefaultMaxRequestBytes bounds a request's body.
	DefaultMaxRequestBytes = 64 << 10
	// maxIDBytes bounds id and by.
	maxIDBytes = 256
	// maxTextBytes bounds reason and rationale.
	maxTextBytes = 16 << 10
)

// requestError is a request refused before anything was done (bad_request).
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

// listRequest is the (empty) request of phase.list, pending, rules and
// models.
type listRequest struct{}

// phaseWire is PhaseRequest as decoded, telling a missing phase from 0.
type phaseWire struct {
	Phase  *int   `json:"phase"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// resumeWire is ResumeRequest as decoded: the deadline is parsed strictly
// (time.Time's own decoding takes a one-digit hour, which RFC 3339 and the
// schema's date-time refuse).
type resumeWire struct {
	ID       string  `json:"id"`
	Reason   string  `json:"reason,omitempty"`
	By       string  `json:"by"`
	Tokens   int64   `json:"tokens,omitempty"`
	Dollars  float64 `json:"dollars,omitempty"`
	Deadline *string `json:"deadline,omitempty"`
	Extend   string  `json:"extend,omitempty"`
	Force    bool    `json:"force,omitempty"`
	Answer   string  `json:"answer,omitempty"`
}

// maxExtend bounds a resume's extend: far beyond any deadline Rule 14
// allows, and far from time.Time's overflow.
const maxExtend = 366 * 24 * time.Hour

// ParseExtend reads a resume's extend: a positive Go duration of at most
// a year.
func ParseExtend(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxExtend {
		return 0, badRequest("extend %q: want a positive duration of at most %s, e.g. 2h", s, maxExtend)
	}
	return d, nil
}

// requestIDPattern is the shape of a replay's request_id.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// rfc3339 is the shape of an RFC 3339 date-time (section 5.6).
var rfc3339 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$`)

func parseDeadline(s string) (*time.Time, error) {
	if !rfc3339.MatchString(s) {
		return nil, badRequest("deadline %q: want an RFC 3339 date-time", s)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, badRequest("deadline %q: %v", s, err)
	}
	return &t, nil
}

// decodeRequest turns the body of a request on verb into its typed, valid
// request: one of PauseRequest, ResumeRequest, CancelRequest,
// DecideRequest, PhaseRequest or listRequest. Any other input is a
// *requestError. It is the service's only decoder of untrusted bytes.
func decodeRequest(verb string, data []byte, maxBytes int) (any, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	if verb == VerbReplay || verb == VerbReplayPreview {
		maxBytes = max(maxBytes, DefaultMaxReplayBytes)
	}
	if len(data) > maxBytes {
		return nil, badRequest("request of %d bytes exceeds %d", len(data), maxBytes)
	}
	if r, ok, err := decodeWaveRequest(verb, data); ok {
		return r, err
	}
	if verb == VerbChain {
		return decodeChainRequest(data)
	}
	if verb == VerbAgents {
		return decodeAgentsRequest(data)
	}
	if verb == VerbCost {
		if len(bytes.TrimSpace(data)) == 0 {
			data = []byte("{}")
		}
		return decodeCostRequest(data)
	}
	if r, ok, err := decodeCompositionRequest(verb, data); ok {
		return r, err
	}
	if r, ok, err := decodeReadRequest(verb, data); ok {
		return r, err
	}
	switch verb {
	case VerbPause:
		var r PauseRequest
		if err := strict(data, &r); err != nil {
			return nil, err
		}
		r.By = cleanBy(r.By)
		return r, firstErr(checkID(r.ID), checkBy(r.By, true), checkText("reason", r.Reason))
	case VerbCancel:
		var r CancelRequest
		if err := strict(data, &r); err != nil {
			return nil, err
		}
		r.By = cleanBy(r.By)
		return r, firstErr(checkID(r.ID), checkBy(r.By, true), checkText("reason", r.Reason))
	case VerbResume:
		return decodeResume(data)
	case VerbDecide:
		var r DecideRequest
		if err := strict(data, &r); err != nil {
			return nil, err
		}
		r.By = cleanBy(r.By)
		err := firstErr(checkID(r.ID), checkBy(r.By, true), checkText("rationale", r.Rationale))
		if err == nil && r.Decision != admin.DecisionAccept && r.Decision != admin.DecisionRevise && r.Decision != admin.DecisionReject {
			err = badRequest("decision %q: want accept, revise or reject", r.Decision)
		}
		if err == nil && r.Decision == admin.DecisionRevise && strings.TrimSpace(r.Rationale) == "" {
			err = badRequest("revise needs a rationale: the executor gets it as the review's findings")
		}
		return r, err
	case VerbReplay, VerbReplayPreview:
		return decodeReplay(data)
	case VerbPhasePause, VerbPhaseResume:
		var w phaseWire
		if err := strict(data, &w); err != nil {
			return nil, err
		}
		w.By = cleanBy(w.By)
		if w.Phase == nil {
			return nil, badRequest("phase is required")
		}
		if !capsule.Phase(*w.Phase).Valid() {
			return nil, badRequest("phase %d out of range 0–%d", *w.Phase, capsule.NumPhases-1)
		}
		return PhaseRequest{Phase: *w.Phase, By: w.By, Reason: w.Reason}, firstErr(checkBy(w.By, false), checkText("reason", w.Reason))
	case VerbPhaseList, VerbPending, VerbRules, VerbModels:
		if len(bytes.TrimSpace(data)) == 0 {
			return listRequest{}, nil
		}
		var r listRequest
		return r, strict(data, &r)
	}
	return nil, badRequest("unknown verb %q", verb)
}

// decodeResume checks a resume: its overrides are positive caps, a future
// deadline or an extend, not both.
func decodeResume(data []byte) (any, error) {
	var w resumeWire
	if err := strict(data, &w); err != nil {
		return nil, err
	}
	w.By = cleanBy(w.By)
	r := ResumeRequest{ID: w.ID, Reason: w.Reason, By: w.By, Tokens: w.Tokens, Dollars: w.Dollars, Extend: w.Extend, Force: w.Force, Answer: w.Answer}
	err := firstErr(checkID(r.ID), checkBy(r.By, true), checkText("reason", r.Reason), checkText("answer", r.Answer))
	if err == nil && w.Deadline != nil {
		r.Deadline, err = parseDeadline(*w.Deadline)
	}
	if err == nil && r.Extend != "" {
		_, err = ParseExtend(r.Extend)
		if err == nil && r.Deadline != nil {
			err = badRequest("deadline and extend exclude each other")
		}
	}
	if err == nil && r.Tokens < 0 {
		err = badRequest("tokens %d: want a positive cap (or 0 to keep it)", r.Tokens)
	}
	if err == nil && r.Dollars < 0 {
		err = badRequest("dollars %g: want a positive cap (or 0 to keep it)", r.Dollars)
	}
	return r, err
}

// decodeReplay checks a replay: its request id, phase and corrected
// capsule (an object, run from RECEPTION).
func decodeReplay(data []byte) (any, error) {
	var r ReplayRequest
	if err := strict(data, &r); err != nil {
		return nil, err
	}
	r.By = cleanBy(r.By)
	err := firstErr(checkID(r.ID), checkBy(r.By, true), checkText("reason", r.Reason))
	if err == nil && r.RequestID != "" && !requestIDPattern.MatchString(r.RequestID) {
		err = badRequest("request_id %q: want 1 to 64 of [A-Za-z0-9_-]", r.RequestID)
	}
	if err == nil && r.FromPhase != nil && !capsule.Phase(*r.FromPhase).Valid() {
		err = badRequest("from_phase %d out of range 0–%d", *r.FromPhase, capsule.NumPhases-1)
	}
	if err == nil && r.Capsule != nil {
		if t := bytes.TrimSpace(r.Capsule); len(t) == 0 || t[0] != '{' {
			err = badRequest("capsule: want the corrected capsule, a JSON object")
		} else if r.FromPhase != nil && *r.FromPhase != int(capsule.Reception) {
			err = badRequest("a corrected capsule runs from RECEPTION (phase 0), not phase %d", *r.FromPhase)
		}
	}
	return r, err
}

// strict decodes exactly one JSON object with no unknown members into v.
func strict(data []byte, v any) error {
	if !utf8.Valid(data) {
		return badRequest("request is not UTF-8")
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return badRequest("request: want a JSON object")
	}
	if err := checkMembers(data); err != nil {
		return err
	}
	// encoding/json matches member names case-insensitively; the schemas
	// (and every other reader) do not, so names are checked exactly first.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return badRequest("request: %v", err)
	}
	known := memberNames(v)
	for name := range members {
		if !known[name] {
			return badRequest("request: unknown member %q", name)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("request: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("request: data after the JSON object")
	}
	return nil
}

// memberNames returns the JSON member names of the struct v points to.
func memberNames(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := make(map[string]bool, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	return names
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkID(id string) error {
	switch {
	case id == "":
		return badRequest("id is required")
	case len(id) > maxIDBytes:
		return badRequest("id of %d bytes exceeds %d", len(id), maxIDBytes)
	case strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return badRequest("id %q contains spaces or control characters", id)
	}
	return nil
}

func checkBy(by string, required bool) error {
	switch {
	case strings.TrimSpace(by) == "" && required:
		return badRequest("by is required: who acts is recorded")
	case len(by) > maxIDBytes:
		return badRequest("by of %d bytes exceeds %d", len(by), maxIDBytes)
	case strings.IndexFunc(by, unicode.IsControl) >= 0:
		return badRequest("by contains control characters")
	}
	return nil
}

func checkText(name, s string) error {
	if len(s) > maxTextBytes {
		return badRequest("%s of %d bytes exceeds %d", name, len(s), maxTextBytes)
	}
	return nil
}
