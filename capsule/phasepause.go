package capsule

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// PhasePauseHorizon is how far ahead an operator's phase pause reaches: the
// consumer's pause_until is set this far from the moment of the pause, so
// it lasts until someone resumes the phase.
const PhasePauseHorizon = 100 * 365 * 24 * time.Hour

// Metadata keys of a phase consumer that record an operator's pause. A
// phase pause has no capsule to record it on, so who paused, when and why
// live beside the pause itself, in the consumer's configuration, and go
// with it: sagad clears them when the phase resumes and keeps them when it
// re-creates the consumer at start.
const (
	PhasePauseByKey     = "sagad_paused_by"
	PhasePauseAtKey     = "sagad_paused_at"
	PhasePauseReasonKey = "sagad_pause_reason"
)

// MaxPhasePauseText bounds a phase pause's by and reason, as the admin
// service bounds them: longer values read from a consumer are refused.
const MaxPhasePauseText = 16 << 10

// ErrInvalidPhasePause is wrapped by every error of [PhasePauseOf]: a
// consumer's metadata holds a pause record sagad did not write.
var ErrInvalidPhasePause = errors.New("invalid phase pause record")

// PhasePause is who paused a phase for every sagad, when and why.
type PhasePause struct {
	By     string    `json:"paused_by,omitempty"`
	Reason string    `json:"pause_reason,omitempty"`
	At     time.Time `json:"paused_at"`
}

// SetMetadata writes p into md (a consumer's metadata), which it returns:
// a new map when md is nil.
func (p PhasePause) SetMetadata(md map[string]string) map[string]string {
	if md == nil {
		md = make(map[string]string, 3)
	}
	md[PhasePauseAtKey] = p.At.UTC().Format(time.RFC3339Nano)
	set := func(k, v string) {
		if v == "" {
			delete(md, k)
			return
		}
		md[k] = v
	}
	set(PhasePauseByKey, p.By)
	set(PhasePauseReasonKey, p.Reason)
	return md
}

// ClearPhasePause removes a pause record from md and reports whether
// there was any.
func ClearPhasePause(md map[string]string) bool {
	had := false
	for _, k := range []string{PhasePauseByKey, PhasePauseAtKey, PhasePauseReasonKey} {
		if _, ok := md[k]; ok {
			had = true
			delete(md, k)
		}
	}
	return had
}

// PhasePauseOf reads the pause record of a consumer's metadata: false when
// there is none (no at key), an error wrapping [ErrInvalidPhasePause] when
// it is not what sagad writes (a time that is not RFC 3339, a text that is
// not UTF-8 or longer than [MaxPhasePauseText]). Anyone allowed to update
// the consumer can write there, so nothing read is taken on trust.
func PhasePauseOf(md map[string]string) (PhasePause, bool, error) {
	at, ok := md[PhasePauseAtKey]
	if !ok {
		return PhasePause{}, false, nil
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return PhasePause{}, false, fmt.Errorf("%w: %s: %w", ErrInvalidPhasePause, PhasePauseAtKey, err)
	}
	p := PhasePause{By: md[PhasePauseByKey], Reason: md[PhasePauseReasonKey], At: t.UTC()}
	for k, v := range map[string]string{PhasePauseByKey: p.By, PhasePauseReasonKey: p.Reason} {
		if len(v) > MaxPhasePauseText || !utf8.ValidString(v) {
			return PhasePause{}, false, fmt.Errorf("%w: %s: not UTF-8 of at most %d bytes", ErrInvalidPhasePause, k, MaxPhasePauseText)
		}
	}
	return p, true, nil
}

// PhasePausedAt returns when a phase consumer was paused: the time its
// pause record gives, else (a pause by another tool, or a record that does
// not read) the pause_until an operator's pause sets minus
// [PhasePauseHorizon] when pause_until is that far ahead, else the zero
// time.
func PhasePausedAt(md map[string]string, pauseUntil *time.Time, now time.Time) time.Time {
	if p, ok, err := PhasePauseOf(md); ok && err == nil {
		return p.At
	}
	if pauseUntil != nil && pauseUntil.Sub(now) > PhasePauseHorizon/2 {
		return pauseUntil.Add(-PhasePauseHorizon).UTC()
	}
	return time.Time{}
}
