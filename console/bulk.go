package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/sagad/sagad/adminsvc"
)

// MaxBulk bounds the capsules one bulk action touches: a filter that
// matches more is refused (narrow it), never cut silently.
const MaxBulk = 1000

// bulkWorkers bounds the admin requests a bulk action has in flight: the
// admin service answers each in a few milliseconds, and a thousand at
// once would crowd out the pipeline's own.
const bulkWorkers = 4

// Bulk verbs: each is the per-capsule action it names, done for every
// capsule selected.
const (
	BulkCancel = "cancel"
	BulkReplay = "replay"
	BulkAccept = "accept"
	BulkResume = "resume"
)

// BulkRequest is the body of a bulk action: the capsules (IDs, or every one
// Filter selects, at most [MaxBulk]), the operator and the reason recorded
// with each action.
type BulkRequest struct {
	// IDs are capsule ids or keys.
	IDs []string `json:"ids"`
	// Filter is a list query (state=halted&wave=w-1, as the list's
	// address has it; offset and limit are ignored): every capsule it
	// matches. Exactly one of IDs and Filter.
	Filter *string `json:"filter"`
	By     string  `json:"by"`
	Reason string  `json:"reason"`
	// Dependents is replay's: also replay the capsules halted
	// dependency_failed on each (absent: no, since a bulk replay usually
	// names them itself, and a capsule replayed twice is refused once).
	Dependents *bool `json:"dependents"`
	// DryRun, replay's only, changes nothing: each capsule's replay is
	// previewed (saga.admin.replay.preview), and the reply says which
	// would halt again, so the page can say how many before it asks.
	DryRun bool `json:"dry_run"`
}

// BulkHalt is a capsule a bulk replay's dry run says would halt again.
type BulkHalt struct {
	ID         string `json:"id"`
	HaltReason string `json:"halt_reason"`
}

// BulkFailure is one capsule a bulk action could not act on, and why.
type BulkFailure struct {
	ID    string `json:"id"`
	Error string `json:"error"`
	// Code is the admin service's error code, when it refused.
	Code string `json:"code,omitempty"`
}

// BulkReply answers a bulk action: how many capsules it was asked to act
// on, which it acted on, and which failed with why.
type BulkReply struct {
	Verb   string        `json:"verb"`
	Total  int           `json:"total"`
	Done   []string      `json:"done"`
	Failed []BulkFailure `json:"failed"`
	// DryRun: nothing was done; Done are the capsules the action would
	// act on, Failed those it would refuse, and WouldHalt those of Done
	// whose replay would halt again, with the reason.
	DryRun    bool       `json:"dry_run,omitempty"`
	WouldHalt []BulkHalt `json:"would_halt,omitempty"`
}

// errBulk: a bulk request is malformed.
var errBulk = errors.New("bulk")

// targets resolves a bulk request to the capsules it names, deduplicated,
// at most MaxBulk.
func (c *Console) targets(b BulkRequest) ([]string, error) {
	switch {
	case b.Filter != nil && len(b.IDs) > 0:
		return nil, fmt.Errorf("%w: give ids or filter, not both", errBulk)
	case b.Filter != nil:
		v, err := url.ParseQuery(*b.Filter)
		if err != nil {
			return nil, fmt.Errorf("%w: filter: %w", errBulk, err)
		}
		q, err := parseQuery(v)
		if err != nil {
			return nil, err
		}
		keys, total := c.index.Keys(q, MaxBulk)
		if total > MaxBulk {
			return nil, fmt.Errorf("%w: the filter matches %d capsules, more than %d: narrow it", errBulk, total, MaxBulk)
		}
		return keys, nil
	case len(b.IDs) == 0:
		return nil, fmt.Errorf("%w: no capsule selected: give ids or filter", errBulk)
	case len(b.IDs) > MaxBulk:
		return nil, fmt.Errorf("%w: %d capsules, at most %d at once", errBulk, len(b.IDs), MaxBulk)
	}
	seen := make(map[string]bool, len(b.IDs))
	out := make([]string, 0, len(b.IDs))
	for _, id := range b.IDs {
		id = strings.TrimSpace(id)
		if id == "" || len(id) > 256 {
			return nil, fmt.Errorf("%w: ids: an empty or overlong id", errBulk)
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// bulk does one action for many capsules: one request, one confirmation
// on the page, each capsule's action recorded by the admin service with the
// operator's name like a single one; what fails is listed, the rest done.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	verb := r.PathValue("verb")
	switch verb {
	case BulkCancel, BulkReplay, BulkAccept, BulkResume:
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no bulk action %q: want cancel, replay, accept or resume", verb))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBytes+1))
	if err != nil || len(body) > maxActionBytes {
		writeError(w, http.StatusBadRequest, "request body unreadable or too large")
		return
	}
	var b BulkRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, "request: "+err.Error())
		return
	}
	if strings.TrimSpace(b.By) == "" {
		writeError(w, http.StatusBadRequest, "by is required: give the operator's name")
		return
	}
	if b.DryRun && verb != BulkReplay {
		writeError(w, http.StatusBadRequest, "dry_run is replay's: the other bulk actions are judged by the capsules' states on the page")
		return
	}
	if b.Filter != nil && !c.waitReady(w, r) {
		return
	}
	ids, err := c.targets(b)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, c.bulkRun(r.Context(), verb, ids, b))
}

// bulkRun does (or, with DryRun, previews) verb for every one of ids, a
// few at once, and says what became of each.
func (c *Console) bulkRun(ctx context.Context, verb string, ids []string, b BulkRequest) BulkReply {
	reply := BulkReply{Verb: verb, Total: len(ids), Done: []string{}, Failed: []BulkFailure{}, DryRun: b.DryRun}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for range min(bulkWorkers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				var halt *string
				var err error
				if b.DryRun {
					halt, err = c.bulkPreview(ctx, id, b)
				} else {
					err = c.bulkOne(ctx, verb, id, b)
					c.cfg.Logger.Info("console action", "verb", verb, "bulk", true, "capsule_id", id, "by", b.By, "error", err)
				}
				mu.Lock()
				if halt != nil {
					reply.WouldHalt = append(reply.WouldHalt, BulkHalt{ID: id, HaltReason: *halt})
				}
				if err != nil {
					f := BulkFailure{ID: id, Error: err.Error()}
					var ae *adminsvc.Error
					if errors.As(err, &ae) {
						f.Error, f.Code = ae.Message, ae.Code
					}
					reply.Failed = append(reply.Failed, f)
				} else {
					reply.Done = append(reply.Done, id)
				}
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return reply
}

// bulkOne does verb for one capsule, bounded by the action timeout.
func (c *Console) bulkOne(ctx context.Context, verb, id string, b BulkRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ActionTimeout)
	defer cancel()
	var err error
	switch verb {
	case BulkCancel:
		_, err = c.admin.Cancel(ctx, adminsvc.CancelRequest{ID: id, Reason: b.Reason, By: b.By})
	case BulkResume:
		_, err = c.admin.Resume(ctx, adminsvc.ResumeRequest{ID: id, Reason: b.Reason, By: b.By})
	case BulkAccept:
		_, err = c.admin.Decide(ctx, adminsvc.DecideRequest{ID: id, Decision: "accept", Rationale: b.Reason, By: b.By})
	case BulkReplay:
		deps := false
		if b.Dependents != nil {
			deps = *b.Dependents
		}
		req := map[string]any{"id": id, "by": b.By, "dependents": deps}
		if b.Reason != "" {
			req["reason"] = b.Reason
		}
		var raw json.RawMessage
		err = c.admin.Call(ctx, verbReplay, req, &raw)
		if unavailable(err) {
			err = fmt.Errorf("replay is not available: no sagad serves %s", adminsvc.Subject(verbReplay))
		}
	}
	return err
}

// bulkPreview previews one capsule's replay: the halt reason it would meet
// again, if any.
func (c *Console) bulkPreview(ctx context.Context, id string, b BulkRequest) (*string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ActionTimeout)
	defer cancel()
	deps := b.Dependents != nil && *b.Dependents
	p, err := c.admin.PreviewReplay(ctx, adminsvc.ReplayRequest{ID: id, Reason: b.Reason, By: b.By, Dependents: &deps})
	if err != nil {
		return nil, err
	}
	return p.WouldHalt, nil
}
