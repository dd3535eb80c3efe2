package agentproto

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Heartbeat is a heartbeat's payload (§8.3).
type Heartbeat struct {
	Agent      string  `json:"agent"`
	Owner      string  `json:"owner"`
	Session    string  `json:"session,omitempty"`
	InstanceID string  `json:"instance_id"`
	TS         string  `json:"ts"`
	IntervalS  float64 `json:"interval_s"`
}

// maxInterval bounds a heartbeat's interval_s: beyond a day an agent is
// as good as silent.
const maxInterval = 24 * 3600

// DecodeHeartbeat decodes a heartbeat; unknown members are ignored (§8.3).
func DecodeHeartbeat(data []byte) (Heartbeat, error) {
	var h Heartbeat
	if len(data) > 64<<10 {
		return Heartbeat{}, malformed("heartbeat of %d bytes", len(data))
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return Heartbeat{}, malformed("heartbeat: %v", err)
	}
	switch {
	case h.InstanceID == "" || len(h.InstanceID) > 256:
		return Heartbeat{}, malformed("heartbeat instance_id must be 1 to 256 bytes")
	case !(h.IntervalS >= 0.01 && h.IntervalS <= maxInterval):
		return Heartbeat{}, malformed("heartbeat interval_s %v: want 0.01 to %d", h.IntervalS, maxInterval)
	}
	return h, nil
}

// Interval is the heartbeat's interval_s as a duration.
func (h Heartbeat) Interval() time.Duration {
	return time.Duration(h.IntervalS * float64(time.Second))
}

// Instance is one agent instance as discovery describes it (§4).
type Instance struct {
	ID              string `json:"id"`
	Agent           string `json:"agent"`
	Owner           string `json:"owner"`
	Session         string `json:"session"`
	ProtocolVersion string `json:"protocol_version"`
	// PromptSubject is the prompt endpoint's subject, as the agent gave it.
	PromptSubject string `json:"prompt_subject"`
	// MaxPayload is the prompt endpoint's max_payload in bytes, 0 when
	// absent or unreadable.
	MaxPayload int64 `json:"max_payload,omitempty"`
	// AttachmentsOK is the prompt endpoint's attachments_ok.
	AttachmentsOK bool `json:"attachments_ok"`
}

// DecodeInfo decodes one $SRV.INFO.agents answer. ok is false for a
// service that is not named "agents" (§4.3: ignored).
func DecodeInfo(data []byte) (inst Instance, ok bool, err error) {
	if len(data) > 1<<20 {
		return Instance{}, false, malformed("info of %d bytes", len(data))
	}
	var info struct {
		Name      string            `json:"name"`
		ID        string            `json:"id"`
		Metadata  map[string]string `json:"metadata"`
		Endpoints []struct {
			Name     string            `json:"name"`
			Subject  string            `json:"subject"`
			Metadata map[string]string `json:"metadata"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return Instance{}, false, malformed("info: %v", err)
	}
	if info.Name != ServiceName {
		return Instance{}, false, nil
	}
	inst = Instance{
		ID: info.ID, Agent: info.Metadata["agent"], Owner: info.Metadata["owner"],
		Session: info.Metadata["session"], ProtocolVersion: info.Metadata["protocol_version"],
	}
	for _, ep := range info.Endpoints {
		if ep.Name != "prompt" {
			continue
		}
		if !LiteralSubject(ep.Subject) {
			return Instance{}, false, malformed("prompt endpoint subject %q is not a literal subject", clip(ep.Subject, 64))
		}
		inst.PromptSubject = ep.Subject
		inst.MaxPayload = ParseSize(ep.Metadata["max_payload"])
		inst.AttachmentsOK = ep.Metadata["attachments_ok"] == "true"
	}
	if inst.ID == "" || inst.PromptSubject == "" {
		return Instance{}, false, malformed("info names no id or no prompt endpoint")
	}
	if inst.Session == "" {
		// The subject's fifth token is the session (§4.3).
		if parts := strings.Split(inst.PromptSubject, "."); len(parts) == 5 {
			inst.Session = parts[4]
		}
	}
	return inst, true, nil
}

// ParseSize reads a max_payload such as "1MB", "512KB" or "1048576"
// (base 1024, case-insensitive); 0 when unreadable.
func ParseSize(s string) int64 {
	s = strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0
	}
	return n * mult
}

// SameVersion reports whether v has the major.minor this package speaks
// (§11.1: the patch level does not matter).
func SameVersion(v string) bool {
	parts := strings.Split(strings.TrimSpace(v), ".")
	return len(parts) >= 2 && parts[0]+"."+parts[1] == ProtocolVersion
}

// Subject is an agent's identity in the verb-first subjects.
type Subject struct {
	Agent, Owner, Session string
}

// ParsePromptSubject splits agents.prompt.<agent>.<owner>.<session>.
func ParsePromptSubject(s string) (Subject, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 5 || parts[0]+"."+parts[1]+"." != PromptPrefix || !LiteralSubject(s) {
		return Subject{}, false
	}
	return Subject{Agent: parts[2], Owner: parts[3], Session: parts[4]}, true
}

// Name is "<agent>.<owner>.<session>".
func (s Subject) Name() string { return s.Agent + "." + s.Owner + "." + s.Session }

// Prompt, Status and Heartbeat are the subject's verb-first subjects.
func (s Subject) Prompt() string    { return PromptPrefix + s.Name() }
func (s Subject) Status() string    { return StatusPrefix + s.Name() }
func (s Subject) Heartbeat() string { return HeartbeatPrefix + s.Name() }
