package executors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/executors/agentproto"
)

// ErrAgentNotFound is wrapped when no live agent matches an endpoint.
var ErrAgentNotFound = errors.New("executors: no live agent matches")

// ErrAgentVersion is wrapped when a configured agent speaks another
// protocol major.minor than [agentproto.ProtocolVersion].
var ErrAgentVersion = errors.New("executors: agent speaks another protocol version")

// AgentSelector names the agent an endpoint calls: a prompt subject, or
// an agent name with an optional owner and session to discover.
type AgentSelector struct {
	Subject string `json:"subject,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Session string `json:"session,omitempty"`
}

func (s AgentSelector) String() string {
	if s.Subject != "" {
		return s.Subject
	}
	return strings.Join([]string{s.Agent, cmpStar(s.Owner), cmpStar(s.Session)}, ".")
}

func cmpStar(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

func (s AgentSelector) matches(inst AgentInstance) bool {
	if s.Subject != "" {
		return inst.PromptSubject == s.Subject
	}
	return inst.Agent == s.Agent && (s.Owner == "" || inst.Owner == s.Owner) && (s.Session == "" || inst.Session == s.Session)
}

// AgentSource is where a directory learns of agents: the subject that
// answers discovery and the subject heartbeats arrive on. With sagad's
// accounts each agent role is a source of its own (its account's exports,
// imported under names of its own), so an agent's answers are only ever
// trusted for the endpoints its credentials serve.
type AgentSource struct {
	// Name identifies the source ("" is the default source).
	Name string
	// InfoSubject answers discovery. Defaults to $SRV.INFO.agents.
	InfoSubject string
	// HeartbeatPrefix is what an import put before the heartbeats'
	// agents.hb.<agent>.<owner>.<session> subjects; "" when none.
	HeartbeatPrefix string
	// HeartbeatSubject is subscribed for heartbeats. Defaults to
	// HeartbeatPrefix + agents.hb.>.
	HeartbeatSubject string
	// Kinds are the configured executor kinds and reviewer ids
	// ("reviewer:<id>") this source's agents serve, for listing.
	Kinds []string
}

// AgentInstance is an agent instance the directory saw.
type AgentInstance struct {
	agentproto.Instance
	// Source is the source it was seen through.
	Source string `json:"source,omitempty"`
	// LastBeat is its last heartbeat; zero when none was seen.
	LastBeat time.Time `json:"last_beat,omitzero"`
	// Interval is its heartbeat interval.
	Interval time.Duration `json:"interval,omitempty"`
	// Alive is whether it beat within three intervals when listed.
	Alive bool `json:"alive"`
	// Kinds are the configured kinds its source serves.
	Kinds []string `json:"kinds,omitempty"`
}

// Name is "<agent>.<owner>.<session>".
func (i AgentInstance) Name() string {
	return i.Agent + "." + i.Owner + "." + i.Session
}

// AgentDirectory knows the agents sagad can reach: it asks discovery when
// a call or a listing needs it and keeps the heartbeats it hears.
type AgentDirectory struct {
	nc      *nats.Conn
	sources []AgentSource
	// wait is how long discovery collects answers: 500ms.
	wait time.Duration
	now  func() time.Time

	mu    sync.Mutex
	beats map[beatKey]agentproto.Heartbeat
	seen  map[beatKey]time.Time
	subs  []*nats.Subscription
}

type beatKey struct{ source, name string }

// NewAgentDirectory returns a directory over sources (none: the default
// source). Start subscribes to the heartbeats.
func NewAgentDirectory(nc *nats.Conn, sources ...AgentSource) *AgentDirectory {
	if len(sources) == 0 {
		sources = []AgentSource{{}}
	}
	for i := range sources {
		if sources[i].InfoSubject == "" {
			sources[i].InfoSubject = agentproto.InfoSubject
		}
		if sources[i].HeartbeatSubject == "" {
			sources[i].HeartbeatSubject = sources[i].HeartbeatPrefix + agentproto.HeartbeatPrefix + ">"
		}
	}
	return &AgentDirectory{nc: nc, sources: sources, wait: 500 * time.Millisecond, now: time.Now,
		beats: map[beatKey]agentproto.Heartbeat{}, seen: map[beatKey]time.Time{}}
}

// Start subscribes to every source's heartbeats.
func (d *AgentDirectory) Start() error {
	for _, src := range d.sources {
		prefix := src.HeartbeatPrefix + agentproto.HeartbeatPrefix
		sub, err := d.nc.Subscribe(src.HeartbeatSubject, func(m *nats.Msg) {
			h, err := agentproto.DecodeHeartbeat(m.Data)
			if err != nil {
				return
			}
			// The subject, not the payload, says whose beat it is: a
			// source's account can only publish on its own export.
			name := strings.TrimPrefix(m.Subject, prefix)
			d.mu.Lock()
			d.beats[beatKey{src.Name, name}] = h
			d.seen[beatKey{src.Name, name}] = d.now()
			d.mu.Unlock()
		})
		if err != nil {
			d.Stop()
			return fmt.Errorf("agents: subscribe %s: %w", src.HeartbeatSubject, err)
		}
		d.mu.Lock()
		d.subs = append(d.subs, sub)
		d.mu.Unlock()
	}
	return nil
}

// Stop ends the heartbeat subscriptions.
func (d *AgentDirectory) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.subs {
		_ = s.Unsubscribe()
	}
	d.subs = nil
}

// List asks every source's discovery and returns the instances that
// answered, with what their heartbeats say, sorted by name.
func (d *AgentDirectory) List(ctx context.Context) ([]AgentInstance, error) {
	// Every source waits out its collection window: side by side, a
	// listing takes one window whatever the number of roles.
	found := make([][]AgentInstance, len(d.sources))
	errs := make([]error, len(d.sources))
	var wg sync.WaitGroup
	for i, src := range d.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = d.discover(ctx, src)
		}()
	}
	wg.Wait()
	var out []AgentInstance
	for _, insts := range found {
		out = append(out, insts...)
	}
	slices.SortFunc(out, func(a, b AgentInstance) int { return strings.Compare(a.Name()+a.ID, b.Name()+b.ID) })
	return out, errors.Join(errs...)
}

// discover collects the answers to src's discovery for the directory's
// wait.
func (d *AgentDirectory) discover(ctx context.Context, src AgentSource) ([]AgentInstance, error) {
	inbox := d.nc.NewRespInbox()
	msgs := make(chan *nats.Msg, 256)
	sub, err := d.nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return nil, fmt.Errorf("agents: discovery on %s: %w", src.InfoSubject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := d.nc.PublishRequest(src.InfoSubject, inbox, nil); err != nil {
		return nil, fmt.Errorf("agents: discovery on %s: %w", src.InfoSubject, err)
	}
	t := time.NewTimer(d.wait)
	defer t.Stop()
	var out []AgentInstance
	seen := map[string]bool{}
	for {
		select {
		case m := <-msgs:
			inst, ok, err := agentproto.DecodeInfo(m.Data)
			if err != nil || !ok || seen[inst.ID] || !d.trusted(src, inst) {
				continue
			}
			seen[inst.ID] = true
			out = append(out, d.annotate(src, inst))
		case <-t.C:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// trusted reports whether inst's prompt subject is one its source may
// serve: the prompt subject names the same agent as its metadata. Across
// accounts the server already limits a source to its export.
func (d *AgentDirectory) trusted(_ AgentSource, inst agentproto.Instance) bool {
	s, ok := agentproto.ParsePromptSubject(inst.PromptSubject)
	return ok && s.Agent == inst.Agent && s.Owner == inst.Owner
}

func (d *AgentDirectory) annotate(src AgentSource, inst agentproto.Instance) AgentInstance {
	name := subjectName(inst.PromptSubject)
	d.mu.Lock()
	h, ok := d.beats[beatKey{src.Name, name}]
	last := d.seen[beatKey{src.Name, name}]
	d.mu.Unlock()
	ai := AgentInstance{Instance: inst, Source: src.Name, Kinds: src.Kinds}
	if ok {
		ai.LastBeat, ai.Interval = last, h.Interval()
		ai.Alive = d.now().Sub(last) <= heartbeatMisses*h.Interval()
	}
	return ai
}

// Pick discovers the instances of source that sel matches and returns one:
// a live one (heartbeats) before one never heard, the first by name. An
// instance speaking another protocol major.minor is refused with
// [ErrAgentVersion].
func (d *AgentDirectory) Pick(ctx context.Context, source string, sel AgentSelector) (AgentInstance, error) {
	src, ok := d.source(source)
	if !ok {
		return AgentInstance{}, fmt.Errorf("%w: unknown source %q", ErrAgentNotFound, source)
	}
	insts, err := d.discover(ctx, src)
	if err != nil {
		return AgentInstance{}, err
	}
	var best *AgentInstance
	var other string
	for i, inst := range insts {
		if !sel.matches(inst) {
			continue
		}
		if !agentproto.SameVersion(inst.ProtocolVersion) {
			other = inst.ProtocolVersion
			continue
		}
		if best == nil || (inst.Alive && !best.Alive) {
			best = &insts[i]
		}
	}
	switch {
	case best != nil:
		return *best, nil
	case other != "":
		return AgentInstance{}, fmt.Errorf("%w: %s answers protocol %q, sagad speaks %s", ErrAgentVersion, sel, other, agentproto.ProtocolVersion)
	}
	return AgentInstance{}, fmt.Errorf("%w: %s", ErrAgentNotFound, sel)
}

// Check is the start-up check of an endpoint: an agent that answers
// discovery with another protocol major.minor is refused. An agent not
// (yet) running passes: it may start after sagad.
func (d *AgentDirectory) Check(ctx context.Context, source string, sel AgentSelector) error {
	_, err := d.Pick(ctx, source, sel)
	if errors.Is(err, ErrAgentVersion) {
		return err
	}
	return nil
}

// Alive reports whether the agent serving subject in source still beats:
// true when its last heartbeat is at most misses intervals old, or when
// none was ever heard (liveness unknown is not death).
func (d *AgentDirectory) Alive(source, subject string, misses int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := beatKey{source, subjectName(subject)}
	h, ok := d.beats[k]
	if !ok {
		return true
	}
	return d.now().Sub(d.seen[k]) <= time.Duration(misses)*h.Interval()
}

func (d *AgentDirectory) source(name string) (AgentSource, bool) {
	for _, s := range d.sources {
		if s.Name == name {
			return s, true
		}
	}
	return AgentSource{}, false
}

// CheckAgents refuses, at start, a configured agent that answers discovery
// speaking another protocol major.minor than sagad's: calling it would
// misread its stream. An agent not running yet passes.
func (r *Registry) CheckAgents(ctx context.Context) error {
	r.mu.RLock()
	dir, eps := r.agents, slices.Clone(r.agentEndpoints)
	r.mu.RUnlock()
	if dir == nil {
		return nil
	}
	insts, err := dir.List(ctx)
	if err != nil && ctx.Err() != nil {
		return err
	}
	var errs []error
	for _, ep := range eps {
		sel := ep.Select
		if ep.Subject != "" {
			sel = AgentSelector{Subject: ep.Subject}
		}
		var same, other bool
		var version string
		for _, inst := range insts {
			if inst.Source != ep.Source || !sel.matches(inst) {
				continue
			}
			if agentproto.SameVersion(inst.ProtocolVersion) {
				same = true
			} else {
				other, version = true, inst.ProtocolVersion
			}
		}
		if other && !same {
			errs = append(errs, fmt.Errorf("%w: %q (%s) answers protocol_version %q, sagad speaks %s", ErrAgentVersion, ep.Name, sel, version, agentproto.ProtocolVersion))
		}
	}
	return errors.Join(errs...)
}
