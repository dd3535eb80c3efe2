package adminsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
)

func init() {
	schemaFor[VerbAgents] = "agents-request"
	replySchema[VerbAgents] = "agents-reply"
}

// serveAgent starts a micro service named "agents" on its own connection,
// as an agent host of the Agent Protocol for NATS registers.
func serveAgent(t *testing.T, nc *nats.Conn, agent, owner, session, version string) micro.Service {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{
		Name: AgentServiceName, Version: "1.0.0", QueueGroup: "agents",
		Metadata: map[string]string{"agent": agent, "owner": owner, "session": session, "protocol_version": version},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	subject := fmt.Sprintf("agents.prompt.%s.%s.%s", agent, owner, session)
	require.NoError(t, svc.AddEndpoint("prompt", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) }),
		micro.WithEndpointSubject(subject), micro.WithEndpointMetadata(map[string]string{"max_payload": "1048576", "attachments_ok": "false"})))
	return svc
}

func beat(t *testing.T, nc *nats.Conn, agent, owner, session string, interval int) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"agent": agent, "owner": owner, "session": session, "instance_id": "i", "ts": time.Now(), "interval_s": interval})
	require.NoError(t, err)
	require.NoError(t, nc.Publish(fmt.Sprintf("agents.hb.%s.%s.%s", agent, owner, session), b))
	require.NoError(t, nc.Flush())
}

// TestAgentsEndpoint: saga.admin.agents lists the agents that answer
// $SRV.INFO.agents and those that beat, alive from their beats, with the
// kinds they serve; other micro services and forged beats are not agents.
func TestAgentsEndpoint(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	now := time.Now()
	clock := func() time.Time { return now }
	watch, err := WatchAgents(nc, AgentWatchConfig{Now: func() time.Time { return clock() }, Serves: func(a AgentInfo) []string {
		if a.Agent == "claude" {
			return []string{"executor:code"}
		}
		return nil
	}})
	require.NoError(t, err)
	t.Cleanup(watch.Stop)
	svc, err := Start(nc, actionsOnly{}, Config{Logger: testLogger(t), Agents: watch})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	f := &fixture{nc: nc}

	agentNC, _ := natstest.Connect(t, s)
	serveAgent(t, agentNC, "claude", "ann", "s1", "0.3")
	serveAgent(t, agentNC, "codex", "bob", "s2", "0.3")
	// Not an agent: another micro service.
	other, err := micro.AddService(agentNC, micro.Config{Name: "billing", Version: "1.0.0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Stop() })
	beat(t, agentNC, "claude", "ann", "s1", 30)
	beat(t, agentNC, "ghost", "eve", "s9", 30) // beats, never answers discovery
	// Forged: the body names another agent than its subject.
	require.NoError(t, agentNC.Publish("agents.hb.codex.bob.s2", []byte(`{"agent":"claude","owner":"ann","session":"s1"}`)))
	require.NoError(t, agentNC.Flush())

	var r AgentsReply
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbAgents, AgentsRequest{WaitMS: 300}, ""), &r))
		return len(r.Agents) == 3
	}, "three agents listed (last %+v)", &r)
	claude, codex, ghost := r.Agents[0], r.Agents[1], r.Agents[2]
	require.Equal(t, "claude", claude.Agent)
	require.True(t, claude.Discovered)
	require.True(t, claude.Alive)
	require.Equal(t, "0.3", claude.ProtocolVersion)
	require.Equal(t, "agents.prompt.claude.ann.s1", claude.PromptSubject)
	require.Equal(t, []string{"executor:code"}, claude.Serves)
	require.Equal(t, 30, claude.IntervalS)
	require.Equal(t, "codex", codex.Agent)
	require.True(t, codex.Discovered)
	require.False(t, codex.Alive, "no beat of its own (the forged one was refused)")
	require.Nil(t, codex.LastHeartbeat)
	require.Equal(t, "ghost", ghost.Agent)
	require.False(t, ghost.Discovered)
	require.True(t, ghost.Alive)

	// Three intervals without a beat: dead.
	clock = func() time.Time { return now.Add(91 * time.Second) }
	require.NoError(t, json.Unmarshal(f.do(t, VerbAgents, []byte(`{"wait_ms":200}`), ""), &r))
	require.False(t, r.Agents[0].Alive)

	f.do(t, VerbAgents, []byte(`{"wait_ms":20000}`), CodeBadRequest)
	f.do(t, VerbAgents, []byte(`{"other":1}`), CodeBadRequest)
}

// actionsOnly is an Actions that does nothing: the agents verb needs none.
type actionsOnly struct{ Actions }

// FuzzDecodeAgentInfo: whatever answers $SRV.INFO.agents, what decodes
// names an agent by three subject tokens and a literal prompt subject.
func FuzzDecodeAgentInfo(f *testing.F) {
	for _, s := range []string{
		`{"name":"agents","id":"X","version":"1.0.0","metadata":{"agent":"claude","owner":"ann","session":"s1","protocol_version":"0.3"},"endpoints":[{"name":"prompt","subject":"agents.prompt.claude.ann.s1"}]}`,
		`{"name":"agents","metadata":{"agent":"a.b","owner":"x","session":"y"}}`,
		`{"name":"billing"}`,
		`{"name":"agents","metadata":{"agent":"a","owner":"b","session":"c"},"endpoints":[{"name":"prompt","subject":"agents.>"}]}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := DecodeAgentInfo(data)
		if err != nil {
			return
		}
		for _, tok := range []string{a.Agent, a.Owner, a.Session} {
			if tok == "" || !token(tok, 128) {
				t.Fatalf("decoded agent token %q", tok)
			}
		}
		if a.PromptSubject != "" && !literalSubject(a.PromptSubject) {
			t.Fatalf("decoded prompt subject %q", a.PromptSubject)
		}
	})
}

// FuzzDecodeHeartbeat: a beat that decodes names its own subject's agent,
// with a bounded interval.
func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add("agents.hb.claude.ann.s1", []byte(`{"agent":"claude","owner":"ann","session":"s1","interval_s":30}`))
	f.Add("agents.hb.codex.bob.s2", []byte(`{"agent":"claude","owner":"ann","session":"s1"}`))
	f.Add("agents.hb.a.b", []byte(`{}`))
	f.Add("agents.hb.a.b.c", []byte(`{"agent":"a","owner":"b","session":"c","interval_s":-1}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		hb, err := DecodeHeartbeat(subject, data)
		if err != nil {
			return
		}
		if subject != "agents.hb."+hb.Agent+"."+hb.Owner+"."+hb.Session {
			t.Fatalf("beat of %s.%s.%s on %s", hb.Agent, hb.Owner, hb.Session, subject)
		}
		if hb.IntervalS < 1 || hb.IntervalS > 3600 {
			t.Fatalf("interval %d", hb.IntervalS)
		}
	})
}
