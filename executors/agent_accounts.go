package executors

import (
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/executors/agentproto"
)

// With sagad's generated accounts (the embedded server, `sagad
// nats-config`) every agent endpoint's host logs in as the role's user
// (executor-<kind>, reviewer-<id>) into an account of its own. What crosses
// into sagad's account SAGA is named per role, so that an agent's answers
// are only ever taken for the endpoint its credentials serve:
//
//	agent account exports            SAGA imports it as
//	agents.prompt.<…> (stream reply)  the same subject (sagad calls it)
//	_INBOX.>                          saga.answer.<role>.> (query answers)
//	$SRV.INFO.agents (stream reply)   saga.agents.info.<role> (discovery)
//	agents.hb.<…> (stream)            saga.hb.<role>.agents.hb.<…> (heartbeats)
//
// A stock agent host needs no setting for this: its inbox prefix stays
// _INBOX, its subjects are the protocol's.

// Role prefixes of the executor and reviewer users.
const (
	RoleExecutorPrefix = "executor-"
	RoleReviewerPrefix = "reviewer-"
)

// RoleName is the user (and seed file) name of executor kind or reviewer
// id key: "executor-<key>" or "reviewer-<key>", lower case, anything but
// [a-z0-9_-] a '-'.
func RoleName(reviewer bool, key string) string {
	b := []byte(strings.ToLower(key))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if reviewer {
		return RoleReviewerPrefix + string(b)
	}
	return RoleExecutorPrefix + string(b)
}

// AgentAnswerPrefix is the subject space of SAGA that reaches role's
// _INBOX.> (where its host asks for answers).
func AgentAnswerPrefix(role string) string { return "saga.answer." + role }

// AgentInfoSubject is SAGA's name of role's $SRV.INFO.agents.
func AgentInfoSubject(role string) string { return "saga.agents.info." + role }

// AgentHeartbeatPrefix is the prefix SAGA's import of role's heartbeats
// puts before their subject.
func AgentHeartbeatPrefix(role string) string { return "saga.hb." + role }

// AgentExportSubject is the prompt subject space an agent endpoint's
// account exports: its subject, or the agents its selector may pick.
func (ep Endpoint) AgentExportSubject() string {
	if ep.Subject != "" {
		return ep.Subject
	}
	return agentproto.PromptPrefix + ep.agentPattern()
}

// AgentHeartbeatSubject is the heartbeat subject space of the endpoint's
// agents.
func (ep Endpoint) AgentHeartbeatSubject() string {
	if s, ok := agentproto.ParsePromptSubject(ep.Subject); ok {
		return s.Heartbeat()
	}
	return agentproto.HeartbeatPrefix + ep.agentPattern()
}

func (ep Endpoint) agentPattern() string {
	switch {
	case ep.Session != "":
		return ep.Agent + "." + cmpStar(ep.Owner) + "." + ep.Session
	case ep.Owner != "":
		return ep.Agent + "." + ep.Owner + ".*"
	}
	return ep.Agent + ".*.*"
}

// answerMapper maps an agent's reply_subject (a subject of its account) to
// SAGA's import of it; only _INBOX subjects are reachable.
func answerMapper(role string) func(string) (string, bool) {
	prefix := AgentAnswerPrefix(role)
	return func(reply string) (string, bool) {
		rest, ok := strings.CutPrefix(reply, "_INBOX.")
		if !ok || !agentproto.LiteralSubject(rest) {
			return "", false
		}
		return prefix + "." + rest, true
	}
}

type fieldError struct{ field, msg string }

// checkAgent checks an agent endpoint's naming: a prompt subject, or an
// agent (with an optional owner and session) to discover, never both.
func (ep Endpoint) checkAgent() []fieldError {
	var errs []fieldError
	token := func(field, v string) {
		if v != "" && (strings.ContainsAny(v, ".*> \t\r\n") || !agentproto.LiteralSubject(v)) {
			errs = append(errs, fieldError{field, fmt.Sprintf("%q is not one subject token (no dots, wildcards or spaces)", v)})
		}
	}
	switch {
	case ep.Subject != "" && (ep.Agent != "" || ep.Owner != "" || ep.Session != ""):
		errs = append(errs, fieldError{".subject", "set either subject or agent (with owner, session), not both"})
	case ep.Subject != "":
		if _, ok := agentproto.ParsePromptSubject(ep.Subject); !ok {
			errs = append(errs, fieldError{".subject", fmt.Sprintf("%q: want agents.prompt.<agent>.<owner>.<session>", ep.Subject)})
		}
	case ep.Agent == "":
		errs = append(errs, fieldError{".agent", `required for type "agent" without a subject: the agent's name (metadata "agent"), for discovery`})
	}
	token(".agent", ep.Agent)
	token(".owner", ep.Owner)
	token(".session", ep.Session)
	if ep.PromptTemplate != "" {
		if _, err := os.Stat(ep.PromptTemplate); err != nil {
			errs = append(errs, fieldError{".prompt_template", err.Error()})
		}
	}
	return errs
}

// agentDirectory is the directory of c's agent endpoints: a source per
// role with sagad's accounts, one shared source without; nil when c has
// no agent endpoint or no connection.
func (c Config) agentDirectory(nc *nats.Conn) *AgentDirectory {
	if nc == nil {
		return nil
	}
	var sources []AgentSource
	var all []string
	for _, role := range []struct {
		reviewer bool
		m        map[string]Endpoint
	}{{false, c.Executors}, {true, c.Reviewers}} {
		for _, key := range sortedKeys(role.m) {
			ep := role.m[key]
			if ep.Type != EndpointAgent {
				continue
			}
			kind := key
			if role.reviewer {
				kind = "reviewer:" + key
			}
			all = append(all, kind)
			if c.AgentAccounts {
				name := RoleName(role.reviewer, key)
				sources = append(sources, AgentSource{
					Name: name, InfoSubject: AgentInfoSubject(name), Kinds: []string{kind},
					HeartbeatPrefix:  AgentHeartbeatPrefix(name) + ".",
					HeartbeatSubject: AgentHeartbeatPrefix(name) + "." + ep.AgentHeartbeatSubject(),
				})
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	if !c.AgentAccounts {
		sources = []AgentSource{{Kinds: all}}
	}
	return NewAgentDirectory(nc, sources...)
}

// agentEndpoint is ep (type agent) ready to call.
func (c Config) agentEndpoint(nc *nats.Conn, dir *AgentDirectory, reviewer bool, key string, ep Endpoint, s settings) (AgentEndpoint, error) {
	a := AgentEndpoint{
		Conn: nc, Name: key, Subject: ep.Subject, Directory: dir, Timeout: s.timeout, IdleTimeout: s.idle,
		Select: AgentSelector{Agent: ep.Agent, Owner: ep.Owner, Session: ep.Session},
	}
	if c.AgentAccounts {
		a.Source = RoleName(reviewer, key)
		a.AnswerSubject = answerMapper(a.Source)
	}
	if ep.PromptTemplate != "" {
		kind := KindExecute
		if reviewer {
			kind = KindReview
		}
		t, err := LoadPromptTemplate(ep.PromptTemplate, kind)
		if err != nil {
			return AgentEndpoint{}, fmt.Errorf("prompt_template: %w", err)
		}
		a.Template = t
	}
	return a, nil
}
