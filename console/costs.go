package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/costs"
	"github.com/sagad/sagad/internal/tracing"
)

// CostsView is what the Costs page draws: the spend grouped as asked, from
// saga.admin.cost.
type CostsView struct {
	Available bool `json:"available"`
	// Message says why Available is false.
	Message string              `json:"message,omitempty"`
	Report  *adminsvc.CostReply `json:"report,omitempty"`
}

// getCosts answers /ui/api/costs?by=wave&since=7d: the report of
// saga.admin.cost. since is a duration back from now (24h, 7d) or an RFC
// 3339 time; absent: all.
func (c *Console) getCosts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := adminsvc.CostRequest{By: q.Get("by")}
	if req.By == "" {
		req.By = costs.ByWave
	}
	if !costs.ValidBy(req.By) {
		writeError(w, http.StatusBadRequest, "by: want one of "+strings.Join(costs.Groupings, ", "))
		return
	}
	if s := q.Get("since"); s != "" {
		t, ok := costsSince(s, c.cfg.Now())
		if !ok {
			writeError(w, http.StatusBadRequest, "since: want a duration back (24h, 7d) or an RFC 3339 time")
			return
		}
		req.Since = &t
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ActionTimeout)
	defer cancel()
	rep, err := c.admin.Cost(ctx, req)
	switch {
	case unavailable(err):
		writeJSON(w, http.StatusOK, CostsView{Message: "costs are not available: no sagad serves " + adminsvc.Subject(adminsvc.VerbCost)})
	case err != nil:
		writeAdminError(w, err)
	default:
		writeJSON(w, http.StatusOK, CostsView{Available: true, Report: &rep})
	}
}

func costsSince(s string, now time.Time) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, true
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 && n <= 3660 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), true
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), true
	}
	return time.Time{}, false
}

// TracePlaceholder is what a trace URL template's trace id goes in place of.
const TracePlaceholder = "{trace_id}"

// ValidateTraceURL checks a --trace-url template: an http or https URL
// holding {trace_id}, e.g. http://jaeger:16686/trace/{trace_id}.
func ValidateTraceURL(tmpl string) error {
	if tmpl == "" {
		return nil
	}
	u, err := url.Parse(strings.ReplaceAll(tmpl, TracePlaceholder, "0af7651916cd43dd8448eb211c80319c"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(tmpl, TracePlaceholder) {
		return &traceURLError{tmpl}
	}
	return nil
}

type traceURLError struct{ tmpl string }

func (e *traceURLError) Error() string {
	return "trace url " + strconv.Quote(e.tmpl) + ": want an http or https URL holding " + TracePlaceholder + ", e.g. http://jaeger:16686/trace/" + TracePlaceholder
}

// traceURL is the link to cp's trace in the tracing backend, "" without a
// template or a trace id. The id is the root span's, 32 hex digits: nothing
// of the capsule's own text reaches the URL.
func (c *Console) traceURL(cp *capsule.Checkpoint) string {
	if c.cfg.TraceURL == "" {
		return ""
	}
	sc, err := tracing.ParseTraceparent(cp.TraceParent)
	if err != nil {
		if tid, ok := tracing.TraceIDOf(cp.TraceID); ok {
			return strings.ReplaceAll(c.cfg.TraceURL, TracePlaceholder, tid.String())
		}
		return ""
	}
	return strings.ReplaceAll(c.cfg.TraceURL, TracePlaceholder, sc.TraceID().String())
}
