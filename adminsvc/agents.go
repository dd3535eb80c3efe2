package adminsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// VerbAgents lists the agents sagad can see (sagactl agents).
const VerbAgents = "agents"

// Discovery of agents that speak the Agent Protocol for NATS: every agent
// is a micro service named "agents" whose metadata names it, and beats on
// its heartbeat subject.
const (
	// AgentServiceName is the micro service name every agent registers.
	AgentServiceName = "agents"
	// AgentInfoSubject is where every agent answers its service info.
	AgentInfoSubject = "$SRV.INFO." + AgentServiceName
	// AgentHeartbeats is the wildcard of the agents' heartbeat subjects,
	// agents.hb.<agent>.<owner>.<session>.
	AgentHeartbeats = "agents.hb.>"
)

// AgentsRequest asks for the agents sagad can see.
type AgentsRequest struct {
	// WaitMS is how long discovery collects the agents' answers: absent
	// or 0 is 1000, at most 10000.
	WaitMS int `json:"wait_ms,omitempty"`
}

// Bounds of discovery.
const (
	defaultAgentsWait = time.Second
	maxAgentsWait     = 10 * time.Second
	// maxAgents bounds the agents one answer lists, and the heartbeats
	// sagad remembers.
	maxAgents = 1000
	// maxAgentMsg bounds an agent's info or heartbeat sagad decodes.
	maxAgentMsg = 64 << 10
	// defaultBeatInterval is an agent's heartbeat interval when its beat
	// does not say (the protocol recommends 30 s).
	defaultBeatInterval = 30
	// missedBeats is how many intervals without a beat make an agent dead.
	missedBeats = 3
)

// AgentsReply lists the agents, sorted by agent, owner and session.
type AgentsReply struct {
	Agents []AgentInfo `json:"agents"`
}

// AgentInfo is one agent instance as discovery and its heartbeats show it.
type AgentInfo struct {
	Agent   string `json:"agent"`
	Owner   string `json:"owner"`
	Session string `json:"session"`
	// ProtocolVersion is the Agent Protocol version it speaks ("0.3");
	// empty when only its heartbeats were seen.
	ProtocolVersion string `json:"protocol_version,omitempty"`
	// InstanceID is its micro service instance id.
	InstanceID string `json:"instance_id,omitempty"`
	// PromptSubject is its prompt endpoint's subject, as discovery gave it.
	PromptSubject string `json:"prompt_subject,omitempty"`
	// Discovered: it answered $SRV.INFO.agents during this request.
	Discovered bool `json:"discovered"`
	// Alive: a heartbeat came within three of its intervals.
	Alive bool `json:"alive"`
	// LastHeartbeat is when sagad last received a beat of it, IntervalS
	// the interval the beat announced.
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
	IntervalS     int        `json:"interval_s,omitempty"`
	// Serves are the configured executor kinds and reviewer ids whose
	// calls go to it ("executor:<kind>", "reviewer:<id>").
	Serves []string `json:"serves,omitempty"`
}

// AgentDirectory lists the agents sagad can see; sagad passes an
// [*AgentWatch].
type AgentDirectory interface {
	Agents(ctx context.Context, wait time.Duration) ([]AgentInfo, error)
}

// AgentWatchConfig configures an [AgentWatch].
type AgentWatchConfig struct {
	// Serves names the configured kinds and reviewers an agent serves.
	// Defaults to none.
	Serves func(a AgentInfo) []string
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger logs undecodable beats once per sender subject. Defaults to
	// discarding.
	Logger *slog.Logger
}

// AgentWatch remembers the agents' heartbeats from Watch on, and
// discovers agents on request.
type AgentWatch struct {
	nc  *nats.Conn
	cfg AgentWatchConfig
	sub *nats.Subscription

	mu    sync.Mutex
	beats map[string]agentBeat
}

type agentBeat struct {
	at       time.Time
	interval int
}

// WatchAgents subscribes to the agents' heartbeats on nc.
func WatchAgents(nc *nats.Conn, cfg AgentWatchConfig) (*AgentWatch, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &AgentWatch{nc: nc, cfg: cfg, beats: map[string]agentBeat{}}
	sub, err := nc.Subscribe(AgentHeartbeats, w.beat)
	if err != nil {
		return nil, fmt.Errorf("adminsvc: watch agents' heartbeats: %w", err)
	}
	w.sub = sub
	return w, nil
}

// Stop stops watching the heartbeats.
func (w *AgentWatch) Stop() {
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
	}
}

// beat records one heartbeat; one that does not decode is ignored.
func (w *AgentWatch) beat(m *nats.Msg) {
	hb, err := DecodeHeartbeat(m.Subject, m.Data)
	if err != nil {
		w.cfg.Logger.Debug("agent heartbeat ignored", "subject", m.Subject, "error", err)
		return
	}
	key := hb.Agent + "." + hb.Owner + "." + hb.Session
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, known := w.beats[key]; !known && len(w.beats) >= maxAgents {
		w.forgetDead()
		if len(w.beats) >= maxAgents {
			return
		}
	}
	w.beats[key] = agentBeat{at: w.cfg.Now(), interval: hb.IntervalS}
}

// forgetDead drops the beats of dead agents; the caller holds w.mu.
func (w *AgentWatch) forgetDead() {
	now := w.cfg.Now()
	for k, b := range w.beats {
		if !alive(b, now) {
			delete(w.beats, k)
		}
	}
}

func alive(b agentBeat, now time.Time) bool {
	return now.Sub(b.at) <= time.Duration(missedBeats*b.interval)*time.Second
}

// Agents asks every agent for its info, collects the answers for wait,
// and merges them with the heartbeats seen: an agent that beats without
// answering is listed too (not discovered).
func (w *AgentWatch) Agents(ctx context.Context, wait time.Duration) ([]AgentInfo, error) {
	inbox := w.nc.NewInbox()
	sub, err := w.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("discover agents: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := w.nc.PublishRequest(AgentInfoSubject, inbox, nil); err != nil {
		return nil, fmt.Errorf("discover agents: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	found := map[string]AgentInfo{}
	for len(found) < maxAgents {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			break // the wait is over
		}
		a, err := DecodeAgentInfo(m.Data)
		if err != nil {
			continue
		}
		found[a.Agent+"."+a.Owner+"."+a.Session+"/"+a.InstanceID] = a
	}
	return w.merge(found), nil
}

// merge joins the discovered agents with the beats seen.
func (w *AgentWatch) merge(found map[string]AgentInfo) []AgentInfo {
	now := w.cfg.Now()
	w.mu.Lock()
	beats := make(map[string]agentBeat, len(w.beats))
	for k, b := range w.beats {
		beats[k] = b
	}
	w.mu.Unlock()
	out := make([]AgentInfo, 0, len(found))
	seen := map[string]bool{}
	withBeat := func(a AgentInfo, b agentBeat) AgentInfo {
		at := b.at.UTC()
		a.LastHeartbeat, a.IntervalS, a.Alive = &at, b.interval, alive(b, now)
		return a
	}
	for _, a := range found {
		key := a.Agent + "." + a.Owner + "." + a.Session
		seen[key] = true
		if b, ok := beats[key]; ok {
			a = withBeat(a, b)
		}
		out = append(out, a)
	}
	for key, b := range beats {
		if seen[key] || len(out) >= maxAgents {
			continue
		}
		parts := strings.SplitN(key, ".", 3)
		out = append(out, withBeat(AgentInfo{Agent: parts[0], Owner: parts[1], Session: parts[2]}, b))
	}
	for i := range out {
		if w.cfg.Serves != nil {
			out[i].Serves = w.cfg.Serves(out[i])
		}
	}
	slices.SortFunc(out, func(x, y AgentInfo) int {
		return strings.Compare(x.Agent+"\x00"+x.Owner+"\x00"+x.Session+"\x00"+x.InstanceID,
			y.Agent+"\x00"+y.Owner+"\x00"+y.Session+"\x00"+y.InstanceID)
	})
	return out
}

// ErrBadAgentMessage is wrapped by every refusal of [DecodeAgentInfo] and
// [DecodeHeartbeat].
var ErrBadAgentMessage = errors.New("bad agent message")

// DecodeAgentInfo reads an agent's answer on $SRV.INFO.agents: a micro
// service info named "agents" whose metadata names the agent, owner and
// session (each one subject token) and the protocol version; the prompt
// endpoint's subject is taken as the agent gave it. Anything can answer
// there, so every field is checked; errors wrap [ErrBadAgentMessage].
func DecodeAgentInfo(data []byte) (AgentInfo, error) {
	if len(data) > maxAgentMsg {
		return AgentInfo{}, fmt.Errorf("%w: info of %d bytes", ErrBadAgentMessage, len(data))
	}
	var info micro.Info
	if err := json.Unmarshal(data, &info); err != nil {
		return AgentInfo{}, fmt.Errorf("%w: %w", ErrBadAgentMessage, err)
	}
	if info.Name != AgentServiceName {
		return AgentInfo{}, fmt.Errorf("%w: service %q is no agent", ErrBadAgentMessage, info.Name)
	}
	a := AgentInfo{
		Agent: info.Metadata["agent"], Owner: info.Metadata["owner"], Session: info.Metadata["session"],
		ProtocolVersion: info.Metadata["protocol_version"], InstanceID: info.ID, Discovered: true,
	}
	if err := checkAgentName(a.Agent, a.Owner, a.Session); err != nil {
		return AgentInfo{}, err
	}
	if !printableText(a.ProtocolVersion, 32) || !printableText(a.InstanceID, 128) {
		return AgentInfo{}, fmt.Errorf("%w: protocol_version or instance id malformed", ErrBadAgentMessage)
	}
	for _, e := range info.Endpoints {
		if e.Name == "prompt" && literalSubject(e.Subject) {
			a.PromptSubject = e.Subject
		}
	}
	return a, nil
}

// Heartbeat is an agent's heartbeat as [DecodeHeartbeat] reads it.
type Heartbeat struct {
	Agent      string `json:"agent"`
	Owner      string `json:"owner"`
	Session    string `json:"session"`
	InstanceID string `json:"instance_id,omitempty"`
	IntervalS  int    `json:"interval_s,omitempty"`
}

// DecodeHeartbeat reads a beat on agents.hb.<agent>.<owner>.<session>: a
// JSON object whose agent, owner and session are the subject's own (so
// one agent cannot beat for another's name within what it may publish)
// and whose interval_s, absent, is 30 s, else 1 to 3600. Errors wrap
// [ErrBadAgentMessage].
func DecodeHeartbeat(subject string, data []byte) (Heartbeat, error) {
	if len(data) > maxAgentMsg {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat of %d bytes", ErrBadAgentMessage, len(data))
	}
	parts := strings.Split(subject, ".")
	if len(parts) != 5 || parts[0] != "agents" || parts[1] != "hb" {
		return Heartbeat{}, fmt.Errorf("%w: subject %q is no heartbeat subject", ErrBadAgentMessage, subject)
	}
	var hb Heartbeat
	if err := json.Unmarshal(bytes.TrimSpace(data), &hb); err != nil {
		return Heartbeat{}, fmt.Errorf("%w: %w", ErrBadAgentMessage, err)
	}
	if hb.Agent != parts[2] || hb.Owner != parts[3] || hb.Session != parts[4] {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat names %s.%s.%s on %s", ErrBadAgentMessage, hb.Agent, hb.Owner, hb.Session, subject)
	}
	if err := checkAgentName(hb.Agent, hb.Owner, hb.Session); err != nil {
		return Heartbeat{}, err
	}
	if hb.IntervalS == 0 {
		hb.IntervalS = defaultBeatInterval
	}
	if hb.IntervalS < 1 || hb.IntervalS > 3600 {
		return Heartbeat{}, fmt.Errorf("%w: interval_s %d: want 1 to 3600", ErrBadAgentMessage, hb.IntervalS)
	}
	return hb, nil
}

// checkAgentName requires agent, owner and session to be subject tokens.
func checkAgentName(agent, owner, session string) error {
	for _, t := range []string{agent, owner, session} {
		if !token(t, 128) || t == "" {
			return fmt.Errorf("%w: agent, owner and session must be subject tokens (%q, %q, %q)", ErrBadAgentMessage, agent, owner, session)
		}
	}
	return nil
}

// token reports whether s is empty or one literal subject token of at
// most n bytes.
func token(s string, n int) bool {
	if len(s) > n || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsAny(s, ".*> \t\r\n\x00")
}

// literalSubject reports whether s is a literal subject (no wildcard, no
// empty token, no space).
func literalSubject(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, t := range strings.Split(s, ".") {
		if t == "" || !token(t, 256) {
			return false
		}
	}
	return true
}

// printableText reports whether s is UTF-8 without control characters and
// at most n bytes.
func printableText(s string, n int) bool {
	if len(s) > n || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

func decodeAgentsRequest(data []byte) (AgentsRequest, error) {
	var r AgentsRequest
	if len(bytes.TrimSpace(data)) == 0 {
		return r, nil
	}
	if err := strict(data, &r); err != nil {
		return r, err
	}
	if r.WaitMS < 0 || time.Duration(r.WaitMS)*time.Millisecond > maxAgentsWait {
		return r, badRequest("wait_ms %d: want 0 (the default, %d) to %d", r.WaitMS, defaultAgentsWait.Milliseconds(), maxAgentsWait.Milliseconds())
	}
	return r, nil
}

func (s *Service) serveAgents(ctx context.Context, r AgentsRequest) (AgentsReply, error) {
	if s.cfg.Agents == nil {
		return AgentsReply{}, errors.New("this sagad watches no agents")
	}
	wait := defaultAgentsWait
	if r.WaitMS > 0 {
		wait = time.Duration(r.WaitMS) * time.Millisecond
	}
	list, err := s.cfg.Agents.Agents(ctx, wait)
	if list == nil {
		list = []AgentInfo{}
	}
	return AgentsReply{Agents: list}, err
}

// Agents lists the agents the answering sagad can see.
func (c *Client) Agents(ctx context.Context, r AgentsRequest) (AgentsReply, error) {
	var out AgentsReply
	return out, c.call(ctx, VerbAgents, r, &out)
}
