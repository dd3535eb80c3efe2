package capsule

import (
	"strconv"
	"unicode/utf8"
)

// A checkpoint is one NATS message, and a NATS message has a maximum payload
// (1 MiB by default). Everything a checkpoint holds that comes from a
// producer, a rule or a worker is therefore bounded here: findings lists by
// [CapFindings], halt-reason details by the constructors in halt.go, and the
// capsule's own lists by [Capsule.ExceededLimit] at RECEPTION.

// MaxFindings is the most findings sagad keeps in one list it writes (a
// halt's findings, a review's findings): [CapFindings] keeps the first
// MaxFindings-1 and one finding counting the rest.
const MaxFindings = 100

// Bounds of one finding's text, in bytes; longer text is cut at a character
// boundary and ends with "…".
const (
	MaxFindingField   = 256
	MaxFindingMessage = 1024
)

// MaxReasonDetail bounds the detail of a halt reason, in bytes, the same way.
const MaxReasonDetail = 1024

// CapFindings bounds a findings list to at most n entries (n < 1 counts as
// 1): when fs is longer it keeps the first n-1 and ends with one finding
// saying how many more there were ("… and 10,412 more findings"), stamped
// with their rule when they all share one. Every kept finding's field and
// message are cut to [MaxFindingField] and [MaxFindingMessage]. Capping a
// capped list changes nothing. fs is never modified; the result may be fs.
func CapFindings(fs []Finding, n int) []Finding {
	n = max(n, 1)
	var out []Finding
	keep := len(fs)
	if len(fs) > n {
		keep = n - 1
		out = make([]Finding, keep, n)
	}
	for i := 0; i < keep; i++ {
		f := fs[i]
		f.Field = Truncate(f.Field, MaxFindingField)
		f.Message = Truncate(f.Message, MaxFindingMessage)
		if out == nil && (f.Field != fs[i].Field || f.Message != fs[i].Message) {
			out = make([]Finding, keep, len(fs))
			copy(out, fs[:i])
		}
		if out != nil {
			out[i] = f
		}
	}
	if out == nil {
		return fs
	}
	if rest := fs[keep:]; len(rest) > 0 {
		more := Finding{Rule: rest[0].Rule, Title: rest[0].Title}
		for _, f := range rest[1:] {
			if f.Rule != more.Rule || f.Title != more.Title {
				more = Finding{}
				break
			}
		}
		noun := "findings"
		if len(rest) == 1 {
			noun = "finding"
		}
		more.Message = "… and " + groupThousands(len(rest)) + " more " + noun
		out = append(out, more)
	}
	return out
}

// Truncate returns s cut to at most n bytes at a character boundary, ending
// with "…" when it was cut. Invalid UTF-8 is cut as bytes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := max(n-len(ellipsis), 0)
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// groupThousands renders n as "10,412".
func groupThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Hard limits on a capsule's lists, enforced at RECEPTION with
// capsule_limits_exceeded:<field> whatever the configuration: they protect
// the daemon (a lookup per lock and per dependency, a resolve per context
// ref, findings per entry), where Rule 10's configurable limits are policy.
const (
	MaxDependsOn          = 256
	MaxResourceLocks      = 256
	MaxAllowHosts         = 256
	MaxContextRefs        = 1000
	MaxAcceptanceCriteria = 1000
	MaxAllowedPaths       = 1000
	MaxForbiddenPaths     = 1000
)

// ListLimit is one list of a capsule, its length and its hard limit.
type ListLimit struct {
	// Field is the list's field path, e.g. "constraints.allowed_paths".
	Field string
	// Len is the list's length in this capsule.
	Len int
	// Max is the most entries the list may have.
	Max int
}

// ListLimits returns every bounded list of c with its length and limit, in
// schema order.
func (c *Capsule) ListLimits() []ListLimit {
	return []ListLimit{
		{"spec.acceptance_criteria", len(c.Spec.AcceptanceCriteria), MaxAcceptanceCriteria},
		{"context_refs", len(c.ContextRefs), MaxContextRefs},
		{"constraints.resource_locks_required", len(c.Constraints.ResourceLocksRequired), MaxResourceLocks},
		{"constraints.allowed_paths", len(c.Constraints.AllowedPaths), MaxAllowedPaths},
		{"constraints.forbidden_paths", len(c.Constraints.ForbiddenPaths), MaxForbiddenPaths},
		{"constraints.network.allow_hosts", len(c.Constraints.Network.AllowHosts), MaxAllowHosts},
		{"depends_on", len(c.DependsOn), MaxDependsOn},
	}
}

// ExceededLimit returns the first list of c, in schema order, that is longer
// than its hard limit; ok is false when every list fits.
func (c *Capsule) ExceededLimit() (l ListLimit, ok bool) {
	for _, l := range c.ListLimits() {
		if l.Len > l.Max {
			return l, true
		}
	}
	return ListLimit{}, false
}
