package console

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/compose"
)

// CompositionsView is what the Compositions page lists, from
// saga.admin.composition.list.
type CompositionsView struct {
	Available bool `json:"available"`
	// Message says why Available is false.
	Message      string           `json:"message,omitempty"`
	Compositions []compose.Listed `json:"compositions"`
}

// CompositionView is what a composition's page draws, from
// saga.admin.composition.status: the run's manifest, each step with its
// needs (the graph's edges).
type CompositionView struct {
	Available bool             `json:"available"`
	Message   string           `json:"message,omitempty"`
	Outcome   *compose.Outcome `json:"outcome,omitempty"`
}

// compositionsListed bounds the runs the list page asks for.
const compositionsListed = 500

// getCompositions answers /ui/api/compositions.
func (c *Console) getCompositions(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ActionTimeout)
	defer cancel()
	l, err := c.admin.CompositionList(ctx, adminsvc.CompositionListRequest{Limit: compositionsListed})
	switch {
	case unavailable(err):
		writeJSON(w, http.StatusOK, CompositionsView{Message: "compositions are not available: no sagad serves " + adminsvc.Subject(adminsvc.VerbCompositionList), Compositions: []compose.Listed{}})
	case err != nil:
		writeAdminError(w, err)
	default:
		if l.Compositions == nil {
			l.Compositions = []compose.Listed{}
		}
		writeJSON(w, http.StatusOK, CompositionsView{Available: true, Compositions: l.Compositions})
	}
}

// getComposition answers /ui/api/compositions/{id}?producer=P&run=N: a
// run's status (the latest run without run; producer "-" is sagad's own
// account, absent when only one producer used the id).
func (c *Console) getComposition(w http.ResponseWriter, r *http.Request) {
	req := adminsvc.CompositionRequest{CompositionID: r.PathValue("id")}
	q := r.URL.Query()
	if q.Has("producer") {
		p := q.Get("producer")
		if p == "-" {
			p = ""
		}
		req.Producer = &p
	}
	if s := q.Get("run"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "run: want a run number")
			return
		}
		req.Run = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ActionTimeout)
	defer cancel()
	o, err := c.admin.CompositionStatus(ctx, req)
	switch {
	case unavailable(err):
		writeJSON(w, http.StatusOK, CompositionView{Message: "compositions are not available: no sagad serves " + adminsvc.Subject(adminsvc.VerbCompositionStatus)})
	case err != nil:
		writeAdminError(w, err)
	default:
		writeJSON(w, http.StatusOK, CompositionView{Available: true, Outcome: &o})
	}
}
