package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/status"
	"github.com/sagad/sagad/store"
)

//go:embed ui
var uiFiles embed.FS

// Prefix is where sagad mounts the console.
const Prefix = "/ui/"

// ErrBasicAuth: Config.BasicAuth is not "user:password".
var ErrBasicAuth = errors.New("console basic auth: want user:password with a non-empty user and password")

// ErrTokenTooShort: Config.Token is shorter than [MinTokenLen] bytes.
var ErrTokenTooShort = errors.New("console token too short")

// Config configures a [Console].
type Config struct {
	// Logger logs the console's failures and every action. Defaults to
	// discarding.
	Logger *slog.Logger
	// Token, if set, is required: as "Authorization: Bearer <token>", or the
	// cookie the console sets after /ui/?token=<token> is opened once. It
	// must be at least [MinTokenLen] bytes.
	Token string
	// BasicAuth, if set ("user:password"), is required as HTTP basic auth.
	// With Token too, either is accepted.
	BasicAuth string
	// InboxLimit bounds each list of the inbox. Defaults to 200.
	InboxLimit int
	// ReadTimeout bounds each read of a request. Defaults to 5s.
	ReadTimeout time.Duration
	// ActionTimeout bounds an admin request. Defaults to 35s (longer than
	// the admin service's own).
	ActionTimeout time.Duration
	// Heartbeat is how often an idle event stream sends a comment, so
	// proxies keep it open. Defaults to 15s.
	Heartbeat time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Calls are the agent calls this sagad runs (sagad passes its
	// pipeline's): a capsule's page shows its call live. Nil: none shown.
	Calls *status.Calls
	// TraceURL links a capsule's trace id to the tracing backend: a URL
	// template holding {trace_id} ([ValidateTraceURL]). Defaults to none:
	// the id shows as text.
	TraceURL string
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.InboxLimit <= 0 {
		c.InboxLimit = 200
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 5 * time.Second
	}
	if c.ActionTimeout <= 0 {
		c.ActionTimeout = adminsvc.DefaultTimeout + 5*time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.Token != "" && len(c.Token) < MinTokenLen {
		return fmt.Errorf("%w: %d bytes, want at least %d (e.g. openssl rand -hex 32)", ErrTokenTooShort, len(c.Token), MinTokenLen)
	}
	if c.BasicAuth != "" {
		u, p, ok := strings.Cut(c.BasicAuth, ":")
		if !ok || u == "" || p == "" {
			return ErrBasicAuth
		}
	}
	return ValidateTraceURL(c.TraceURL)
}

// Console serves the web console. Start it, mount [Console.Handler] at
// [Prefix], and Stop it before shutting the HTTP server down (Stop ends the
// event streams, which would otherwise hold the shutdown).
type Console struct {
	cfg    Config
	st     *store.Store
	js     jetstream.JetStream
	admin  *adminsvc.Client
	index  *Index
	static http.Handler
	// failed rate limits wrong tokens and passwords per client address.
	failed *failures
	// labels are the rows' titles and kinds, read on demand.
	labels labels

	mu     sync.Mutex
	reader *client.Client // bound on first use (events)
	// ctx lives from Start to Stop; done is closed when the watch, once
	// begun, has ended.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// closing ends the event streams at Stop.
	closing chan struct{}
}

// New returns a console over st (the pipeline's store), acting through
// admin.
func New(st *store.Store, admin *adminsvc.Client, cfg Config) (*Console, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		return nil, err
	}
	return &Console{
		cfg: cfg, st: st, js: st.JetStream(), admin: admin,
		index:   NewIndex(cfg.Logger, cfg.Now),
		static:  http.FileServerFS(sub),
		failed:  newFailures(cfg.Now),
		closing: make(chan struct{}),
	}, nil
}

// Index is the console's index of checkpoints.
func (c *Console) Index() *Index { return c.index }

// Start readies the console. The checkpoint watch that fills the index
// begins with the first request to the console's API, not here: a sagad
// whose console nobody opens receives no checkpoint writes for it. Until
// the index is filled the list answers 503.
func (c *Console) Start(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return errors.New("console already started")
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return nil
}

// watch starts the checkpoint watch, once, if the console is started and
// not stopped.
func (c *Console) watch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil || c.ctx == nil || c.ctx.Err() != nil {
		return
	}
	c.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.index.FollowCompositions(c.ctx, c.st.JetStream())
	}()
	go func() {
		defer close(c.done)
		c.index.Run(c.ctx, c.st.Checkpoints.WatchAll)
		wg.Wait()
	}()
}

// Stop ends the event streams and the watch.
func (c *Console) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closing:
	default:
		close(c.closing)
	}
	if c.cancel != nil {
		c.cancel()
	}
	if c.done != nil {
		<-c.done
	}
}

// Handler serves the console under [Prefix].
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/api/inbox", c.getInbox)
	mux.HandleFunc("GET /ui/api/capsules", c.listCapsules)
	mux.HandleFunc("GET /ui/api/capsules/{id}", c.getCapsule)
	mux.HandleFunc("GET /ui/api/calls/{id}", c.getCall)
	mux.HandleFunc("GET /ui/api/artifact", c.getArtifact)
	mux.HandleFunc("GET /ui/api/phases", c.getPhases)
	mux.HandleFunc("GET /ui/api/waves", c.getWaves)
	mux.HandleFunc("GET /ui/api/costs", c.getCosts)
	mux.HandleFunc("GET /ui/api/compositions", c.getCompositions)
	mux.HandleFunc("GET /ui/api/compositions/{id}", c.getComposition)
	mux.HandleFunc("GET /ui/api/stream", c.stream)
	mux.HandleFunc("POST /ui/api/actions/{verb}", c.act)
	mux.HandleFunc("POST /ui/api/bulk/{verb}", c.bulk)
	mux.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	static := http.StripPrefix("/ui", c.static)
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		static.ServeHTTP(w, r)
	})
	return c.secure(mux)
}

// cookieName holds the token once /ui/?token= was opened.
const cookieName = "sagad_ui_token"

// secure adds the security headers and checks authentication.
func (c *Console) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Only our embedded script and style run: nothing inline, nothing
		// from elsewhere, so even an escaping slip cannot run a capsule's
		// text as code.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if !c.authorized(w, r) {
			return
		}
		if strings.HasPrefix(r.URL.Path, "/ui/api/") {
			c.watch()
		}
		next.ServeHTTP(w, r)
	})
}

// authorized checks the token or basic auth, when configured, and answers
// the request when it fails (or when it set the token cookie).
func (c *Console) authorized(w http.ResponseWriter, r *http.Request) bool {
	if c.cfg.Token == "" && c.cfg.BasicAuth == "" {
		// Open, so on loopback only (sagad sees to it). A page of another
		// site whose name it points at 127.0.0.1 (DNS rebinding) would be
		// same-origin to the browser: only loopback names are answered.
		if !loopbackHost(r.Host) {
			writeError(w, http.StatusForbidden, "the console without authentication answers only to a loopback address (localhost, 127.0.0.1, [::1]); set a token or basic auth to reach it by another name")
			return false
		}
		return true
	}
	addr := clientAddr(r)
	if wait, ok := c.failed.blocked(addr); ok {
		tooMany(w, wait)
		return false
	}
	if c.cfg.Token != "" {
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/ui/api/") {
			if !equal(t, c.cfg.Token) {
				c.failed.fail(addr)
				writeError(w, http.StatusUnauthorized, "wrong token")
				return false
			}
			// Keep the token in a cookie the page's script cannot read,
			// and take it out of the address bar (and the history).
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: t, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			q := r.URL.Query()
			q.Del("token")
			u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return false
		}
		if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(t, c.cfg.Token) {
			return true
		}
		if ck, err := r.Cookie(cookieName); err == nil && equal(ck.Value, c.cfg.Token) {
			return true
		}
	}
	if c.cfg.BasicAuth != "" {
		if u, p, ok := r.BasicAuth(); ok && equal(u+":"+p, c.cfg.BasicAuth) {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="sagad console", charset="UTF-8"`)
	}
	if presented(r) {
		// A request without credentials (a first visit) is no guess.
		c.failed.fail(addr)
	}
	writeError(w, http.StatusUnauthorized, "authentication required: open /ui/?token=<token> once (or send Authorization: Bearer), or log in with the console's basic auth")
	return false
}

// presented reports whether r carries credentials of any kind: a bearer or
// basic Authorization header or the token cookie.
func presented(r *http.Request) bool {
	if r.Header.Get("Authorization") != "" {
		return true
	}
	_, err := r.Cookie(cookieName)
	return err == nil
}

// loopbackHost reports whether a Host header names this machine: localhost
// or a loopback IP, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// equal compares secrets in constant time (of their hashes, so the length
// is not told either).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	// Code is the admin service's error code, when it refused.
	Code string `json:"code,omitempty"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

// readCtx bounds one read of a request.
func (c *Console) readCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.cfg.ReadTimeout)
}

// waitReady answers 503 while the index is still loading.
func (c *Console) waitReady(w http.ResponseWriter, r *http.Request) bool {
	ctx, cancel := c.readCtx(r)
	defer cancel()
	select {
	case <-c.index.Ready():
		return true
	case <-ctx.Done():
		writeError(w, http.StatusServiceUnavailable, "the console is still reading the checkpoints; try again")
		return false
	}
}

func (c *Console) getInbox(w http.ResponseWriter, r *http.Request) {
	if !c.waitReady(w, r) {
		return
	}
	in := c.index.Inbox(c.cfg.InboxLimit)
	ctx, cancel := c.readCtx(r)
	defer cancel()
	view := InboxView{Inbox: in, Labels: c.labels.of(ctx, c.st, in.Decide, in.Paused, in.Waiting, in.Halted), Phases: []admin.PhaseState{}}
	// The paused phases come from the consumers, which the index does not
	// watch: read on each request (one request per phase). A failed read
	// leaves the banner out rather than the whole inbox.
	if states, err := admin.Phases(ctx, c.js); err != nil {
		c.cfg.Logger.Warn("console: read the phases for the inbox", "err", err)
		view.PhasesUnknown = true
	} else if paused := admin.PausedPhases(states); paused != nil {
		view.Phases = paused
	}
	view.Counts["phases"] = len(view.Phases)
	writeJSON(w, http.StatusOK, view)
}

// InboxView answers the inbox endpoint: the lists and their rows' labels,
// and the phases paused for every sagad (the inbox's banner).
type InboxView struct {
	// Phases are the paused phases, in phase order, with who paused each,
	// when, why and how many messages wait; counted as counts.phases.
	Phases []admin.PhaseState `json:"phases"`
	// PhasesUnknown: the phases could not be read this time.
	PhasesUnknown bool `json:"phases_unknown,omitempty"`
	Inbox
	// Labels are the rows' titles and kinds by key.
	Labels map[string]Label `json:"labels"`
}

// ListView answers the list endpoint: the page, its rows' labels, and how
// many capsules are in each state (whatever the filter).
type ListView struct {
	Page
	Labels map[string]Label      `json:"labels"`
	States map[capsule.State]int `json:"states"`
}

// errBadQuery: a list query's parameter is malformed.
var errBadQuery = errors.New("bad query")

// parseQuery reads the list's filters: state, phase (0–6 or a name), wave,
// chain, halt (a halt reason or its prefix), trigger, q (part of an id), offset
// and limit.
func parseQuery(v url.Values) (Query, error) {
	q := Query{
		State: capsule.State(v.Get("state")), Wave: v.Get("wave"), Chain: v.Get("chain"), Halt: v.Get("halt"),
		Trigger: capsule.Trigger(v.Get("trigger")), Search: strings.TrimSpace(v.Get("q")),
	}
	if q.State != "" && !q.State.Valid() {
		return q, fmt.Errorf("%w: state %q: want one of in_progress, waiting, paused, waiting_for_operator, completed, halted, cancelled", errBadQuery, q.State)
	}
	if q.Trigger != "" && !q.Trigger.Known() {
		return q, fmt.Errorf("%w: trigger %q: want one of %s", errBadQuery, q.Trigger, triggerNames())
	}
	var ok bool
	if q.Phase, ok = parsePhase(v.Get("phase")); !ok {
		return q, fmt.Errorf("%w: phase %q: want 0–6 or a phase name", errBadQuery, v.Get("phase"))
	}
	for name, dst := range map[string]*int{"offset": &q.Offset, "limit": &q.Limit} {
		if s := v.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return q, fmt.Errorf("%w: %s %q: want a number from 0", errBadQuery, name, s)
			}
			*dst = n
		}
	}
	return q, nil
}

func (c *Console) listCapsules(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !c.waitReady(w, r) {
		return
	}
	p := c.index.List(q)
	ctx, cancel := c.readCtx(r)
	defer cancel()
	writeJSON(w, http.StatusOK, ListView{Page: p, Labels: c.labels.of(ctx, c.st, p.Items), States: c.index.StateCounts()})
}

// CapsuleView is what a capsule's page shows.
type CapsuleView struct {
	Status     client.Status       `json:"status"`
	Checkpoint *capsule.Checkpoint `json:"checkpoint"`
	Revision   uint64              `json:"revision"`
	// Capsule is the capsule as RECEPTION kept it; nil when its bytes are
	// gone (retention) or are no capsule.
	Capsule *capsule.Capsule `json:"capsule,omitempty"`
	// CapsuleRaw is the kept bytes themselves (when they are JSON): what
	// the editor of a corrected replay starts from, every member kept.
	CapsuleRaw json.RawMessage `json:"capsule_raw,omitempty"`
	// RuleTitles names the constitution's rules by number, so a finding
	// that carries only its rule number reads as the rule.
	RuleTitles map[int]string `json:"rule_titles"`
	// Caps and Deadline are those in force: the capsule's, changed by the
	// operator's overrides.
	Caps     *capsule.Budget `json:"caps,omitempty"`
	Deadline *time.Time      `json:"deadline,omitempty"`
	// NeedsYou: a person must act (pending).
	NeedsYou bool            `json:"needs_you"`
	Events   []capsule.Event `json:"events"`
	// EventsError says why the events could not be read.
	EventsError string `json:"events_error,omitempty"`
	// TraceURL links the capsule's trace (--trace-url); absent without one.
	TraceURL string `json:"trace_url,omitempty"`
}

func (c *Console) getCapsule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	key := id
	if row, ok := c.index.Lookup(id); ok {
		key = row.Key
	} else if cid, ok := capsule.CanonicalID(id); ok {
		key = cid
	}
	if !store.ValidKey(key) {
		writeError(w, http.StatusNotFound, "no capsule "+id)
		return
	}
	ctx, cancel := c.readCtx(r)
	defer cancel()
	cp, rev, err := c.st.Checkpoints.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no capsule "+id)
		return
	}
	if err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	v := CapsuleView{Status: client.StatusOf(cp), Checkpoint: cp, Revision: rev, Events: []capsule.Event{}, TraceURL: c.traceURL(cp)}
	if call, ok := c.cfg.Calls.Get(cp.Key, c.cfg.Now()); ok {
		v.Status.Call = &call
	}
	_, v.NeedsYou = admin.PendingOf(cp, c.cfg.Now())
	v.RuleTitles = ruleTitles()
	if raw, kept, err := c.st.Raw(ctx, key); err == nil && kept != nil {
		v.Capsule = kept
		if json.Valid(raw) {
			v.CapsuleRaw = raw
		}
		caps := cp.State.Caps(kept.Budget)
		dl := cp.State.DeadlineIn(kept.Deadline)
		v.Caps, v.Deadline = &caps, &dl
	}
	if cl, err := c.client(ctx); err != nil {
		v.EventsError = err.Error()
	} else if evs, err := cl.History(ctx, key); err != nil {
		v.EventsError = err.Error()
	} else {
		v.Events = evs
	}
	writeJSON(w, http.StatusOK, v)
}

// CallView answers the call endpoint: the agent call running for a
// capsule in this sagad, or null.
type CallView struct {
	Call *client.Call `json:"call"`
}

// getCall answers a capsule's running call, which its page polls when the
// event stream says a call changed (a call is transient: see status.Calls).
func (c *Console) getCall(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("id")
	if row, ok := c.index.Lookup(key); ok {
		key = row.Key
	}
	var v CallView
	if call, ok := c.cfg.Calls.Get(key, c.cfg.Now()); ok {
		v.Call = &call
	}
	writeJSON(w, http.StatusOK, v)
}

// client returns the reader of events, bound on first use.
func (c *Console) client(ctx context.Context) (*client.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reader == nil {
		cl, err := client.NewClient(ctx, c.js)
		if err != nil {
			return nil, err
		}
		c.reader = cl
	}
	return c.reader, nil
}

func (c *Console) getArtifact(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("ref")
	if !strings.HasPrefix(ref, "artifact:") || len(ref) > 512 {
		writeError(w, http.StatusBadRequest, "ref: want an artifact: reference")
		return
	}
	ctx, cancel := c.readCtx(r)
	defer cancel()
	a, err := c.st.Artifacts.Get(ctx, ref)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, jetstream.ErrObjectNotFound) {
		writeError(w, http.StatusNotFound, "no artifact "+ref)
		return
	}
	if err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (c *Console) getPhases(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ActionTimeout)
	defer cancel()
	phases, err := c.admin.Phases(ctx)
	if err != nil {
		writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, adminsvc.PhasesReply{Phases: phases})
}

// WavesView answers the waves endpoint.
type WavesView struct {
	// Available: a sagad serves saga.admin.wave.list.
	Available bool   `json:"available"`
	Message   string `json:"message,omitempty"`
	// Waves is wave.list's list as the admin service sent it.
	Waves json.RawMessage `json:"waves,omitempty"`
}

// getWaves forwards wave.list; without a sagad serving it (a build without
// waves) the page says waves are not available.
func (c *Console) getWaves(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ActionTimeout)
	defer cancel()
	var reply struct {
		Waves json.RawMessage `json:"waves"`
	}
	err := c.admin.Call(ctx, verbWaveList, struct{}{}, &reply)
	switch {
	case unavailable(err):
		writeJSON(w, http.StatusOK, WavesView{Message: "waves are not available: no sagad serves " + adminsvc.Subject(verbWaveList) + " (a build without waves)"})
	case err != nil:
		writeAdminError(w, err)
	default:
		writeJSON(w, http.StatusOK, WavesView{Available: true, Waves: reply.Waves})
	}
}

func writeAdminError(w http.ResponseWriter, err error) {
	var ae *adminsvc.Error
	switch {
	case errors.As(err, &ae):
		code := http.StatusInternalServerError
		switch ae.Code {
		case adminsvc.CodeBadRequest:
			code = http.StatusBadRequest
		case adminsvc.CodeNotFound:
			code = http.StatusNotFound
		case adminsvc.CodeRefused:
			code = http.StatusConflict
		}
		writeJSON(w, code, apiError{Error: ae.Message, Code: ae.Code})
	case errors.Is(err, adminsvc.ErrNoSagad):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeError(w, http.StatusBadGateway, err.Error())
	}
}

// ActionRequest is the body of an action. Which members count depends on
// the verb: pause and cancel take id, by, reason; resume also tokens,
// dollars, deadline, extend, force and answer; decide takes id, by, decision, rationale;
// phase.pause and phase.resume take phase, by, reason.
type ActionRequest struct {
	ID        string  `json:"id"`
	By        string  `json:"by"`
	Reason    string  `json:"reason"`
	Decision  string  `json:"decision"`
	Rationale string  `json:"rationale"`
	Tokens    int64   `json:"tokens"`
	Dollars   float64 `json:"dollars"`
	// Deadline is RFC 3339, or empty to keep it.
	Deadline string `json:"deadline"`
	// Extend is resume's other way to move the deadline: a Go duration
	// from sagad's now (e.g. "2h"), or empty.
	Extend string `json:"extend"`
	Force  bool   `json:"force"`
	// Answer is resume's: a person's answer for the executor's next call.
	Answer string `json:"answer"`
	Phase  *int   `json:"phase"`
	// FromPhase and Dependents are replay's: the phase the new run starts
	// at (absent: where the capsule stopped), and whether the dependents
	// halted dependency_failed on it go along (absent: yes).
	FromPhase  *int  `json:"from_phase"`
	Dependents *bool `json:"dependents"`
	// WaveID names the wave of wave.set and wave.close; Tokens and Dollars
	// are wave.set's new caps (absent: unchanged, 0: none).
	WaveID string `json:"wave_id"`
	// Capsule is replay's corrected capsule (a JSON object): the console
	// seals it (integrity.sha256, replacing any), and sagad checks it as
	// RECEPTION checks an intake before the new run starts at RECEPTION.
	Capsule json.RawMessage `json:"capsule"`
}

// hasCapsule reports whether a carries a corrected capsule (JSON null is
// none).
func (a ActionRequest) hasCapsule() bool {
	return len(a.Capsule) > 0 && string(a.Capsule) != "null"
}

// Verbs a newer sagad serves that this build's admin client has no method
// for: the console forwards them as they are (adminsvc.Client.Call), and
// says "not available" when no sagad serves them.
const (
	verbReplay    = "replay"
	verbWaveList  = "wave.list"
	verbWaveSet   = "wave.set"
	verbWaveClose = "wave.close"
)

// unavailable reports an error that says no sagad serves the verb at all
// (NATS answered at once that nobody listens on its subject).
func unavailable(err error) bool {
	var ns *adminsvc.NoSagadError
	return errors.As(err, &ns) && ns.Waited == 0
}

// csrfHeader must be on every action: a page of another origin cannot set
// it without a CORS preflight, which the console never allows.
const csrfHeader = "X-Sagad-Console"

// sameOrigin refuses cross-site requests: the custom header must be there,
// the body must be JSON, and Origin (or Sec-Fetch-Site), when the browser
// sends it, must name this host.
func sameOrigin(r *http.Request) error {
	if r.Header.Get(csrfHeader) != "1" {
		return errors.New("missing " + csrfHeader + " header: actions come from the console's page")
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return errors.New("actions take application/json")
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site %s)", s)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("cross-origin request refused (Origin %s)", o)
		}
	}
	return nil
}

// maxActionBytes bounds an action's body: a replay may carry a corrected
// capsule, up to what the admin service takes for one.
const maxActionBytes = adminsvc.DefaultMaxReplayBytes

func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBytes+1))
	if err != nil || len(body) > maxActionBytes {
		writeError(w, http.StatusBadRequest, "request body unreadable or too large")
		return
	}
	var a ActionRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		writeError(w, http.StatusBadRequest, "request: "+err.Error())
		return
	}
	if strings.TrimSpace(a.By) == "" {
		writeError(w, http.StatusBadRequest, "by is required: give the operator's name")
		return
	}
	verb := r.PathValue("verb")
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ActionTimeout)
	defer cancel()
	var reply any
	switch verb {
	case adminsvc.VerbPause:
		reply, err = c.admin.Pause(ctx, adminsvc.PauseRequest{ID: a.ID, Reason: a.Reason, By: a.By})
	case adminsvc.VerbCancel:
		reply, err = c.admin.Cancel(ctx, adminsvc.CancelRequest{ID: a.ID, Reason: a.Reason, By: a.By})
	case adminsvc.VerbResume:
		req := adminsvc.ResumeRequest{ID: a.ID, Reason: a.Reason, By: a.By, Tokens: a.Tokens, Dollars: a.Dollars, Extend: a.Extend, Force: a.Force, Answer: a.Answer}
		if a.Deadline != "" {
			t, perr := time.Parse(time.RFC3339, a.Deadline)
			if perr != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("deadline %q: want an RFC 3339 date-time", a.Deadline))
				return
			}
			req.Deadline = &t
		}
		reply, err = c.admin.Resume(ctx, req)
	case adminsvc.VerbDecide:
		reply, err = c.admin.Decide(ctx, adminsvc.DecideRequest{ID: a.ID, Decision: a.Decision, Rationale: a.Rationale, By: a.By})
	case adminsvc.VerbPhasePause, adminsvc.VerbPhaseResume:
		if a.Phase == nil {
			writeError(w, http.StatusBadRequest, "phase is required")
			return
		}
		req := adminsvc.PhaseRequest{Phase: *a.Phase, By: a.By, Reason: a.Reason}
		var phases any
		if verb == adminsvc.VerbPhasePause {
			phases, err = c.admin.PausePhase(ctx, req)
		} else {
			phases, err = c.admin.ResumePhase(ctx, req)
		}
		reply = map[string]any{"phases": phases}
	case verbReplay, adminsvc.VerbReplayPreview:
		// The preview takes the replay's request and changes nothing.
		req := map[string]any{"id": a.ID, "by": a.By}
		if a.Reason != "" {
			req["reason"] = a.Reason
		}
		if a.FromPhase != nil {
			req["from_phase"] = *a.FromPhase
		}
		if a.Dependents != nil {
			req["dependents"] = *a.Dependents
		}
		if a.hasCapsule() {
			sealed, msg := sealCorrected(a)
			if msg != "" {
				writeError(w, http.StatusBadRequest, msg)
				return
			}
			req["capsule"] = json.RawMessage(sealed)
		}
		var raw json.RawMessage
		err = c.admin.Call(ctx, verb, req, &raw)
		reply = raw
	case verbWaveSet, verbWaveClose:
		req := map[string]any{"wave_id": a.WaveID, "by": a.By}
		if a.Reason != "" {
			req["reason"] = a.Reason
		}
		if verb == verbWaveSet {
			// Only what the operator typed changes: the page sends the caps
			// it was given, and the request carries those alone.
			var caps map[string]json.RawMessage
			_ = json.Unmarshal(body, &caps)
			if _, ok := caps["tokens"]; ok {
				req["tokens"] = a.Tokens
			}
			if _, ok := caps["dollars"]; ok {
				req["dollars"] = a.Dollars
			}
		}
		var raw json.RawMessage
		err = c.admin.Call(ctx, verb, req, &raw)
		reply = raw
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no action %q: want pause, resume, cancel, decide, replay, replay.preview, phase.pause, phase.resume, wave.set or wave.close", verb))
		return
	}
	if unavailable(err) && (verb == verbReplay || verb == adminsvc.VerbReplayPreview || verb == verbWaveSet || verb == verbWaveClose) {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("%s is not available: no sagad serves %s (a build without it)", verb, adminsvc.Subject(verb)))
		return
	}
	c.cfg.Logger.Info("console action", "verb", verb, "capsule_id", a.ID, "by", a.By, "decision", a.Decision, "phase", a.Phase, "error", err)
	if err != nil {
		writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

// sealCorrected seals a replay's corrected capsule, or says why it cannot:
// the operator edits the capsule's JSON and cannot compute its digest by
// hand, so the console, part of sagad, seals what was typed. What the seal
// vouches for is only that these are the bytes the operator sent; sagad
// still checks them as an intake.
func sealCorrected(a ActionRequest) ([]byte, string) {
	if a.FromPhase != nil && *a.FromPhase != int(capsule.Reception) {
		return nil, "a corrected capsule runs from RECEPTION: leave the phase out"
	}
	sealed, err := capsule.Seal(a.Capsule)
	if err != nil {
		return nil, "the corrected capsule: " + err.Error()
	}
	return sealed, ""
}

// ruleTitles maps each rule of the constitution to its title.
func ruleTitles() map[int]string {
	m := make(map[int]string, len(rules.Constitution))
	for _, r := range rules.Constitution {
		m[r.Number] = r.Title
	}
	return m
}

// streamWriteTimeout bounds each write of an event stream.
const streamWriteTimeout = 30 * time.Second

// stream sends the index's changes as server-sent events: "capsule" with a
// [Row] for each checkpoint written or removed, "resync" when the page
// should read again what it shows (it fell behind, or the index was
// rebuilt).
func (c *Console) stream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	changes, stop := c.index.Subscribe()
	defer stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The browser reconnects after retry ms when the stream drops.
	if _, err := io.WriteString(w, "retry: 2000\nevent: hello\ndata: {}\n\n"); err != nil {
		return
	}
	fl.Flush()
	beat := time.NewTicker(c.cfg.Heartbeat)
	defer beat.Stop()
	// A running call's progress is told as "calls" (no data: the page
	// reads the call it shows), at most every callsEvery.
	calls := c.callsChanged()
	var callsDue <-chan time.Time
	rc := http.NewResponseController(w)
	for {
		var err error
		// A reader that stops reading (a suspended laptop) ends its
		// stream rather than holding this handler, and sagad's shutdown,
		// on a full socket; the browser reconnects and reads anew.
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		select {
		case <-r.Context().Done():
			return
		case <-c.closing:
			return
		case <-beat.C:
			_, err = io.WriteString(w, ": heartbeat\n\n")
		case <-calls:
			calls = nil
			if callsDue == nil {
				callsDue = time.After(callsEvery)
			}
			continue
		case <-callsDue:
			callsDue, calls = nil, c.callsChanged()
			_, err = io.WriteString(w, "event: calls\ndata: {}\n\n")
		case ch := <-changes:
			if ch.Resync {
				_, err = io.WriteString(w, "event: resync\ndata: {}\n\n")
				break
			}
			b, jerr := json.Marshal(ch.Row)
			if jerr != nil {
				continue
			}
			// JSON has no raw newline, so one data line carries it.
			_, err = fmt.Fprintf(w, "event: capsule\ndata: %s\n\n", b)
		}
		if err != nil {
			return
		}
		fl.Flush()
	}
}

// callsEvery bounds how often an event stream tells of calls' progress.
const callsEvery = 500 * time.Millisecond

// callsChanged is closed at the next change of a running call (never
// without Config.Calls).
func (c *Console) callsChanged() <-chan struct{} {
	if c.cfg.Calls == nil {
		return nil
	}
	return c.cfg.Calls.Changed()
}

// triggerNames lists the triggers a list query may filter by, those of
// capsule.TriggerTable.
func triggerNames() string {
	var b strings.Builder
	for i, t := range capsule.AllTriggers() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(t))
	}
	return b.String()
}
