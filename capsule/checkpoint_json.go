package capsule

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// AppendJSON appends c's stored encoding to b: what encoding/json writes
// for a Checkpoint, but for three things a reader makes again
// (Checkpoint.UnmarshalJSON): key when it is capsule_id, trace_id when it
// is trace_parent's trace id, and each transition whose phase name is its
// phase's as a compact array. Decoding it gives what decoding
// encoding/json's gives (the differential harness holds it to that),
// several times faster. sagad writes a whole checkpoint on every
// transition and claim, and reflection-driven encoding was the largest
// single cost of a hop; the compact parts are a third of the bytes of a
// valid capsule's checkpoints. Rarely present parts (findings, reviews,
// pause, overrides) still go through encoding/json.
func (c *Checkpoint) AppendJSON(b []byte) ([]byte, error) {
	if b == nil {
		b = make([]byte, 0, 1024+160*len(c.History))
	}
	var err error
	b = c.appendIdentity(b)
	if b, err = c.appendLineage(b); err != nil {
		return nil, err
	}
	b = append(b, `,"created_at":`...)
	if b, err = appendTime(b, c.CreatedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"updated_at":`...)
	if b, err = appendTime(b, c.UpdatedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"state":`...)
	if b, err = c.State.appendJSON(b); err != nil {
		return nil, err
	}
	b = append(b, `,"history":`...)
	if b, err = appendHistory(b, c.History); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendIdentity writes the members that name the capsule and its trace,
// from schema_version to chain.
func (c *Checkpoint) appendIdentity(b []byte) []byte {
	b = append(b, `{"schema_version":`...)
	b = appendString(b, c.SchemaVersion)
	b = append(b, `,"capsule_id":`...)
	b = appendString(b, c.CapsuleID)
	// key and trace_id are left out where a reader makes them again from
	// capsule_id and trace_parent (Checkpoint.UnmarshalJSON): on a valid
	// capsule's path that is every write, 90 bytes each.
	if c.Key != c.CapsuleID {
		b = append(b, `,"key":`...)
		b = appendString(b, c.Key)
	}
	if id, ok := traceIDOf(c.TraceParent); !ok || id != c.TraceID {
		b = append(b, `,"trace_id":`...)
		b = appendString(b, c.TraceID)
	}
	if c.TraceParent != "" {
		b = append(b, `,"trace_parent":`...)
		b = appendString(b, c.TraceParent)
	}
	if c.TraceProducerSpan != "" {
		b = append(b, `,"trace_producer_span":`...)
		b = appendString(b, c.TraceProducerSpan)
	}
	if c.WaveID != "" {
		b = append(b, `,"wave_id":`...)
		b = appendString(b, c.WaveID)
	}
	if c.Producer != "" {
		b = append(b, `,"producer":`...)
		b = appendString(b, c.Producer)
	}
	if c.Chain != nil {
		b = append(b, `,"chain":{"id":`...)
		b = appendString(b, c.Chain.ID)
		b = append(b, `,"step":`...)
		b = strconv.AppendInt(b, int64(c.Chain.Step), 10)
		if c.Chain.Run != 0 {
			b = append(b, `,"run":`...)
			b = strconv.AppendInt(b, int64(c.Chain.Run), 10)
		}
		if c.Chain.Gate != "" {
			b = append(b, `,"gate":`...)
			b = appendString(b, c.Chain.Gate)
		}
		b = append(b, '}')
	}
	return b
}

// appendLineage writes the members from digest to replay_token: where
// the capsule came from and which run this is.
func (c *Checkpoint) appendLineage(b []byte) ([]byte, error) {
	if c.Digest != "" {
		b = append(b, `,"digest":`...)
		b = appendString(b, c.Digest)
	}
	if c.Constitution != "" {
		b = append(b, `,"constitution":`...)
		b = appendString(b, c.Constitution)
	}
	if c.Parent != "" {
		b = append(b, `,"parent":`...)
		b = appendString(b, c.Parent)
	}
	if c.Depth != 0 {
		b = append(b, `,"depth":`...)
		b = strconv.AppendInt(b, int64(c.Depth), 10)
	}
	if l := c.ChildLimit; l != nil {
		b = append(b, `,"child_limit":{`...)
		sep := ""
		if l.MaxAttempts != 0 {
			b = append(b, `"max_attempts":`...)
			b = strconv.AppendInt(b, int64(l.MaxAttempts), 10)
			sep = ","
		}
		if l.WallUntil != nil {
			b = append(b, sep+`"wall_until":`...)
			var err error
			if b, err = appendTime(b, *l.WallUntil); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	if c.IntakeSeq != 0 {
		b = append(b, `,"intake_seq":`...)
		b = strconv.AppendUint(b, c.IntakeSeq, 10)
	}
	if c.OutcomeEmitted {
		b = append(b, `,"outcome_emitted":true`...)
	}
	if c.Run != 0 {
		b = append(b, `,"run":`...)
		b = strconv.AppendInt(b, int64(c.Run), 10)
	}
	if c.CycleBase != 0 {
		b = append(b, `,"cycle_base":`...)
		b = strconv.AppendInt(b, int64(c.CycleBase), 10)
	}
	if c.ReplayToken != "" {
		b = append(b, `,"replay_token":`...)
		b = appendString(b, c.ReplayToken)
	}
	return b, nil
}

// appendHistory writes ts as a JSON array of transitions.
func appendHistory(b []byte, ts []Transition) ([]byte, error) {
	if ts == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i := range ts {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = ts[i].appendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// appendJSON writes t compactly, [phase,cycle,"outcome","at"] with
// ,"detail",run after them when either is set, where its phase name is its
// phase's (every transition sagad makes): the history is most of a
// checkpoint's bytes and is written again at every transition. Any other
// t is written as encoding/json writes it. Transition.UnmarshalJSON reads
// both.
func (t *Transition) appendJSON(b []byte) ([]byte, error) {
	if t.PhaseName == t.Phase.String() {
		return t.appendCompact(b)
	}
	b = append(b, `{"phase":`...)
	b = strconv.AppendInt(b, int64(t.Phase), 10)
	b = append(b, `,"phase_name":`...)
	b = appendString(b, t.PhaseName)
	b = append(b, `,"cycle":`...)
	b = strconv.AppendInt(b, int64(t.Cycle), 10)
	b = append(b, `,"outcome":`...)
	b = appendString(b, t.Outcome)
	if t.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendString(b, t.Detail)
	}
	if t.Run != 0 {
		b = append(b, `,"run":`...)
		b = strconv.AppendInt(b, int64(t.Run), 10)
	}
	b = append(b, `,"at":`...)
	b, err := appendTime(b, t.At)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendCompact writes t as the array Transition.UnmarshalJSON reads.
func (t *Transition) appendCompact(b []byte) ([]byte, error) {
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(t.Phase), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(t.Cycle), 10)
	b = append(b, ',')
	b = outcomes.append(b, t.Outcome)
	b = append(b, ',')
	b, err := appendTime(b, t.At)
	if err != nil {
		return nil, err
	}
	if t.Detail != "" || t.Run != 0 {
		b = append(b, ',')
		b = appendString(b, t.Detail)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(t.Run), 10)
	}
	return append(b, ']'), nil
}

// quotedSet is a few constant strings that every write holds (an
// outcome, a phase name, a state) with what appendString writes for each,
// made by appendString once: writing one is a comparison and a copy, not a
// look at every byte.
type quotedSet struct {
	plain, quoted []string
}

func newQuotedSet(plain ...string) *quotedSet {
	q := &quotedSet{plain: plain}
	for _, s := range plain {
		q.quoted = append(q.quoted, string(appendString(nil, s)))
	}
	return q
}

// append writes s as appendString does.
func (q *quotedSet) append(b []byte, s string) []byte {
	for i, p := range q.plain {
		if p == s {
			return append(b, q.quoted[i]...)
		}
	}
	return appendString(b, s)
}

var (
	outcomes = newQuotedSet(OutcomePassed, OutcomeCompleted, OutcomeLoopedBack, OutcomeHalted,
		OutcomeCancelled, OutcomeReplayed)
	phaseNamesQuoted = newQuotedSet(phaseNames[:]...)
	states           = newQuotedSet(string(InProgress), string(Completed), string(Halted), string(Cancelled),
		string(Paused), string(WaitingForOperator), string(Waiting))
)

func (s *CheckpointState) appendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"phase":`...)
	b = strconv.AppendInt(b, int64(s.Phase), 10)
	b = append(b, `,"phase_name":`...)
	b = phaseNamesQuoted.append(b, s.PhaseName)
	b = append(b, `,"progress":`...)
	b = strconv.AppendInt(b, int64(s.Progress), 10)
	b = append(b, `,"cycle":`...)
	b = strconv.AppendInt(b, int64(s.Cycle), 10)
	b = append(b, `,"status":`...)
	b = states.append(b, string(s.Status))
	if s.HaltReason != "" {
		b = append(b, `,"halt_reason":`...)
		b = appendString(b, s.HaltReason)
	}
	b = append(b, `,"budget_used":`...)
	if b, err = appendUsage(b, s.BudgetUsed); err != nil {
		return nil, err
	}
	b = append(b, `,"locks_held":`...)
	b = appendStrings(b, s.LocksHeld)
	b = append(b, `,"artifact_refs":`...)
	b = appendStrings(b, s.ArtifactRefs)
	if len(s.Findings) > 0 {
		b = append(b, `,"findings":`...)
		b = appendFindings(b, s.Findings)
	}
	if b, err = s.appendReviews(b); err != nil {
		return nil, err
	}
	if b, err = s.appendWork(b); err != nil {
		return nil, err
	}
	if b, err = s.appendFailures(b); err != nil {
		return nil, err
	}
	if b, err = s.appendWaits(b); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendReviews writes the reviews, if any.
func (s *CheckpointState) appendReviews(b []byte) ([]byte, error) {
	var err error
	if len(s.Reviews) > 0 {
		b = append(b, `,"reviews":[`...)
		for i := range s.Reviews {
			if i > 0 {
				b = append(b, ',')
			}
			r := &s.Reviews[i]
			b = append(b, `{"cycle":`...)
			b = strconv.AppendInt(b, int64(r.Cycle), 10)
			b = append(b, `,"reviewer_id":`...)
			b = appendString(b, r.ReviewerID)
			b = append(b, `,"verdict":`...)
			b = appendString(b, string(r.Verdict))
			if len(r.Findings) > 0 {
				b = append(b, `,"findings":`...)
				b = appendFindings(b, r.Findings)
			}
			b = append(b, `,"usage":`...)
			if b, err = appendUsage(b, r.Usage); err != nil {
				return nil, err
			}
			b = append(b, `,"at":`...)
			if b, err = appendTime(b, r.At); err != nil {
				return nil, err
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return b, nil
}

// appendWork writes the execution claim and its result, if any.
func (s *CheckpointState) appendWork(b []byte) ([]byte, error) {
	var err error
	if x := s.Execution; x != nil {
		b = append(b, `,"execution":{"cycle":`...)
		b = strconv.AppendInt(b, int64(x.Cycle), 10)
		b = append(b, `,"holder":`...)
		b = appendString(b, x.Holder)
		b = append(b, `,"expires_at":`...)
		if b, err = appendTime(b, x.ExpiresAt); err != nil {
			return nil, err
		}
		if x.CallTokenHash != "" {
			b = append(b, `,"call_token_sha256":`...)
			b = appendString(b, x.CallTokenHash)
		}
		b = append(b, '}')
	}
	if r := s.Result; r != nil {
		b = append(b, `,"result":{"cycle":`...)
		b = strconv.AppendInt(b, int64(r.Cycle), 10)
		if r.ArtifactRef != "" {
			b = append(b, `,"artifact_ref":`...)
			b = appendString(b, r.ArtifactRef)
		}
		b = append(b, `,"usage":`...)
		if b, err = appendUsage(b, r.Usage); err != nil {
			return nil, err
		}
		if r.Failed != "" {
			b = append(b, `,"failed":`...)
			b = appendString(b, r.Failed)
		}
		b = append(b, '}')
	}
	return b, nil
}

// appendFailures writes the failed attempts, the pause, the overrides and
// the warnings: rare, and written by encoding/json.
func (s *CheckpointState) appendFailures(b []byte) ([]byte, error) {
	var err error
	if s.Attempts != nil {
		// Rare (only after a failed call the failure policy retries).
		if b, err = appendMarshaled(b, `,"attempts":`, s.Attempts); err != nil {
			return nil, err
		}
	}
	if len(s.AttemptLog) > 0 {
		// Rare too: only capsules whose agent calls failed.
		if b, err = appendMarshaled(b, `,"attempt_log":`, s.AttemptLog); err != nil {
			return nil, err
		}
	}
	if s.Pause != nil {
		if b, err = appendMarshaled(b, `,"pause":`, s.Pause); err != nil {
			return nil, err
		}
	}
	if s.Overrides != nil {
		if b, err = appendMarshaled(b, `,"overrides":`, s.Overrides); err != nil {
			return nil, err
		}
	}
	if len(s.Warned) > 0 {
		if b, err = appendMarshaled(b, `,"warned":`, s.Warned); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// appendWaits writes what a waiting or paused capsule waits on, and the
// operator's answer.
func (s *CheckpointState) appendWaits(b []byte) ([]byte, error) {
	var err error
	if s.LockWaitSince != nil {
		b = append(b, `,"lock_wait_since":`...)
		if b, err = appendTime(b, *s.LockWaitSince); err != nil {
			return nil, err
		}
	}
	if s.AwaitingCycle != 0 {
		b = append(b, `,"awaiting_cycle":`...)
		b = strconv.AppendInt(b, int64(s.AwaitingCycle), 10)
	}
	if s.AwaitingUntil != nil {
		b = append(b, `,"awaiting_until":`...)
		if b, err = appendTime(b, *s.AwaitingUntil); err != nil {
			return nil, err
		}
	}
	if len(s.WaitingFor) > 0 {
		b = append(b, `,"waiting_for":`...)
		b = appendStrings(b, s.WaitingFor)
	}
	if s.AwaitingTokenHash != "" {
		b = append(b, `,"awaiting_token_sha256":`...)
		b = appendString(b, s.AwaitingTokenHash)
	}
	if s.WaveReserved != nil {
		b = append(b, `,"wave_reserved":`...)
		if b, err = appendUsage(b, *s.WaveReserved); err != nil {
			return nil, err
		}
	}
	if s.OperatorAnswer != nil {
		// Rare (after an operator answered a pause or revised).
		if b, err = appendMarshaled(b, `,"operator_answer":`, s.OperatorAnswer); err != nil {
			return nil, err
		}
	}
	if len(s.Answers) > 0 {
		if b, err = appendMarshaled(b, `,"answers":`, s.Answers); err != nil {
			return nil, err
		}
	}
	if len(s.AgentQueries) > 0 {
		// Rare (an agent asked a person during its call).
		if b, err = appendMarshaled(b, `,"agent_queries":`, s.AgentQueries); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func appendFindings(b []byte, fs []Finding) []byte {
	b = append(b, '[')
	for i := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		f := &fs[i]
		b = append(b, '{')
		if f.Rule != 0 {
			b = append(b, `"rule":`...)
			b = strconv.AppendInt(b, int64(f.Rule), 10)
			b = append(b, ',')
		}
		if f.Title != "" {
			b = append(b, `"title":`...)
			b = appendString(b, f.Title)
			b = append(b, ',')
		}
		if f.Field != "" {
			b = append(b, `"field":`...)
			b = appendString(b, f.Field)
			b = append(b, ',')
		}
		b = append(b, `"message":`...)
		b = appendString(b, f.Message)
		if f.Source != "" {
			b = append(b, `,"source":`...)
			b = appendString(b, f.Source)
		}
		if f.Severity != "" {
			b = append(b, `,"severity":`...)
			b = appendString(b, f.Severity)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendMarshaled(b []byte, name string, v any) ([]byte, error) {
	m, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(append(b, name...), m...), nil
}

func appendUsage(b []byte, u Usage) ([]byte, error) {
	b = append(b, `{"tokens":`...)
	b = strconv.AppendInt(b, u.Tokens, 10)
	b = append(b, `,"dollars":`...)
	b, err := appendFloat(b, u.Dollars)
	if err != nil {
		return nil, err
	}
	if u.Estimated {
		b = append(b, `,"estimated":true`...)
	}
	return append(b, '}'), nil
}

func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendTime writes t as time.Time.MarshalJSON does.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if t.Location() == time.UTC {
		// sagad's own times: a checkpoint holds a dozen and is written at
		// every transition, so they skip the general formatter.
		return appendUTC(b, t)
	}
	if y := t.Year(); y < 0 || y >= 10000 {
		return nil, fmt.Errorf("checkpoint: time %v: year outside of range [0,9999]", t)
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		// MarshalJSON refuses these too: RFC 3339 has no such zone, and
		// the record would not decode.
		return nil, fmt.Errorf("checkpoint: time %v: timezone hour outside of range [0,23]", t)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendUTC is appendTime of a time in UTC: RFC 3339 with the fraction of
// a second to the nanosecond, trailing zeros (and a zero fraction) left
// out, and "Z". The text is made two digits at a time (digitPairs),
// straight into b's room: a checkpoint holds a dozen times.
func appendUTC(b []byte, t time.Time) ([]byte, error) {
	y, mo, d, h, mi, sec := civil(t)
	if y < 0 || y >= 10000 {
		return nil, fmt.Errorf("checkpoint: time %v: year outside of range [0,9999]", t)
	}
	// Made in place, in the room past b's end: "YYYY-MM-DDTHH:MM:SS",
	// ".nnnnnnnnn" if any, "Z", quoted.
	b = slices.Grow(b, 32)
	buf := (*[32]byte)(b[len(b) : len(b)+32])
	buf[0], buf[5], buf[8], buf[11], buf[14], buf[17] = '"', '-', '-', 'T', ':', ':'
	putPair(buf[1:], y/100)
	putPair(buf[3:], y%100)
	putPair(buf[6:], int(mo))
	putPair(buf[9:], d)
	putPair(buf[12:], h)
	putPair(buf[15:], mi)
	putPair(buf[18:], sec)
	n := 20
	if ns := t.Nanosecond(); ns != 0 {
		digits := 9
		for ns%10 == 0 {
			ns /= 10
			digits--
		}
		buf[20] = '.'
		// From the last digit back, so that the leading zeros come out
		// of the pairs.
		k := digits
		for ; k >= 2; k -= 2 {
			putPair(buf[21+k-2:], ns%100)
			ns /= 100
		}
		if k == 1 {
			buf[21] = byte('0' + ns)
		}
		n = 21 + digits
	}
	buf[n], buf[n+1] = 'Z', '"'
	return b[:len(b)+n+2], nil
}

// digitPairs holds "00" to "99", one after another.
const digitPairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" + "30313233343536373839" +
	"40414243444546474849" + "50515253545556575859" + "60616263646566676869" + "70717273747576777879" +
	"80818283848586878889" + "90919293949596979899"

// putPair writes v (0 to 99) as two digits at dst[0:2].
func putPair(dst []byte, v int) {
	_ = dst[1]
	dst[0], dst[1] = digitPairs[2*v], digitPairs[2*v+1]
}

// civil is t's date and clock in UTC, as t.Date and t.Clock give them.
// The times of a checkpoint are mostly of one or two days, and working out
// a day's date was most of the cost of writing a time: the dates of the
// last days met are remembered (see days).
func civil(t time.Time) (y int, mo time.Month, d, h, mi, s int) {
	sec := t.Unix()
	if sec < 0 || sec >= maxDaySec {
		y, mo, d = t.Date()
		h, mi, s = t.Clock()
		return y, mo, d, h, mi, s
	}
	day, rem := sec/86400, int(sec%86400)
	h, mi, s = rem/3600, rem%3600/60, rem%60
	slot := &days[day%int64(len(days))]
	if v := slot.Load(); v>>32 == uint64(day)+1 {
		return int(v >> 16 & 0xffff), time.Month(v >> 8 & 0xff), int(v & 0xff), h, mi, s
	}
	y, mo, d = t.Date()
	slot.Store((uint64(day)+1)<<32 | uint64(y)<<16 | uint64(mo)<<8 | uint64(d))
	return y, mo, d, h, mi, s
}

// maxDaySec bounds the times whose dates days remembers: from 1970 to the
// end of year 9999, the last a checkpoint can hold.
const maxDaySec = 253402300800

// days remembers the dates of the last days met, one per slot: day+1 (0:
// none) in the high 32 bits, then the year, month and day of the month.
// A slot is read and written whole, so any goroutine may use it.
var days [4]atomic.Uint64

// appendFloat writes f as encoding/json writes a float64.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if d, ok := appendMicros(b, f); ok {
		return d, nil
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("checkpoint: unsupported value %v", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendMicros writes f, from 1e-6 up to 1e9, when it is the float64
// nearest a decimal of at most six places (a usage's dollars): its digits
// are that decimal's, without strconv's search for the shortest. ok is
// false for any other f.
//
// Why they are strconv's: f is the double nearest n/10⁶ (the division of
// two exact doubles rounds correctly), and n < 10¹⁵ has at most 15
// significant digits; two decimals of at most 15 significant digits never
// round to the same double (DBL_DIG), so no shorter decimal, nor another
// as short, gives f.
func appendMicros(b []byte, f float64) ([]byte, bool) {
	if !(f >= 1e-6 && f < 1e9) {
		return b, false
	}
	n := math.Round(f * 1e6)
	if n/1e6 != f {
		return b, false
	}
	micros := int64(n)
	b = strconv.AppendInt(b, micros/1e6, 10)
	frac := micros % 1e6
	if frac == 0 {
		return b, true
	}
	digits := 6
	for frac%10 == 0 {
		frac /= 10
		digits--
	}
	var buf [7]byte
	buf[0] = '.'
	for i := digits; i > 0; i-- {
		buf[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(b, buf[:digits+1]...), true
}

const hexDigits = "0123456789abcdef"

// appendString writes s as encoding/json writes a string, HTML-safe:
// <, > and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // the plain bytes from start to i are still to be copied
	for i := 0; i < len(s); {
		// Most of a checkpoint is plain ASCII (ids, names, digests): skip
		// it eight bytes at a time, and byte by byte only through the
		// chunk that holds something needing a look.
		i = skipPlain(s, i)
		for end := min(i+8, len(s)); i < end; {
			if c := s[i]; c < utf8.RuneSelf && htmlSafe[c] {
				i++
				continue
			}
			b, i, start = appendEscape(b, s, start, i)
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendEscape handles the character at s[i], which is not plain ASCII:
// if it needs an escape, the plain bytes s[start:i] and the escape are
// appended. It returns where the next character starts and where the plain
// bytes still to be copied start.
func appendEscape(b []byte, s string, start, i int) ([]byte, int, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		return b, i + 1, i + 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size == 1:
		b = append(b, s[start:i]...)
		b = append(b, `\ufffd`...)
	case r == '\u2028' || r == '\u2029':
		b = append(b, s[start:i]...)
		b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
	default:
		return b, i + size, start // valid UTF-8 is written as it is
	}
	return b, i + size, i + size
}

// htmlSafe holds the ASCII bytes encoding/json writes as they are with
// HTML escaping on: not a control, not one of " \\ < > &.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// Bytes of a word, for the word-at-a-time test below.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// skipPlain returns the end of the run of plain bytes of s from i on,
// found 8 bytes at a time (it may stop short of the run's end, never past
// it): plain bytes are ASCII, not controls and not one of " \\ < > &, and
// need neither escaping nor a UTF-8 look. Fewer than 8 bytes left are
// read as the string's last 8, the plain bytes before them included.
//
// Once the bytes are known to be ASCII (no top bit), x-n*lsb has a top bit
// set exactly where some byte is below n (the first such byte borrows), so
// "some byte below 0x20" and "some byte equal to c" (x^c*lsb below 1) need
// one subtraction each. A chunk with a byte past ASCII fails on that
// byte's own top bit, whatever the other tests say. '"' and '&' differ in
// one bit (0x04), as do '<' and '>' (0x02): one test each.
func skipPlain(s string, i int) int {
	for i < len(s) {
		j := i
		if len(s)-i < 8 {
			if len(s) < 8 {
				return i
			}
			j = len(s) - 8
		}
		c := s[j : j+8]
		_ = c[7]
		x := uint64(c[0]) | uint64(c[1])<<8 | uint64(c[2])<<16 | uint64(c[3])<<24 |
			uint64(c[4])<<32 | uint64(c[5])<<40 | uint64(c[6])<<48 | uint64(c[7])<<56
		bad := x | (x - 0x20*lsb) |
			((x^('"'*lsb))&^(0x04*lsb) - lsb) |
			((x^('<'*lsb))&^(0x02*lsb) - lsb) |
			((x ^ ('\\' * lsb)) - lsb)
		if bad&msb != 0 {
			return i
		}
		i = j + 8
	}
	return i
}
