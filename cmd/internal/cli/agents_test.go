package cli_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/natstest"
)

// TestAgentsCommand: `sagactl agents` lists an agent (a micro service named
// "agents") with its owner, session and protocol, alive once it beats.
func TestAgentsCommand(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	nc, _ := natstest.Connect(t, o.server)
	svc, err := micro.AddService(nc, micro.Config{Name: adminsvc.AgentServiceName, Version: "1.0.0",
		Metadata: map[string]string{"agent": "claude", "owner": "ann", "session": "s1", "protocol_version": "0.3"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, nc.Publish("agents.hb.claude.ann.s1", []byte(`{"agent":"claude","owner":"ann","session":"s1","interval_s":30}`)))
	require.NoError(t, nc.Flush())

	var r adminsvc.AgentsReply
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		res := o.run(t, "agents", "--wait", "300ms", "-o", "json")
		require.Equal(t, cli.ExitOK, res.code, res.errOut)
		require.NoError(t, json.Unmarshal([]byte(res.out), &r))
		return len(r.Agents) == 1 && r.Agents[0].Alive && r.Agents[0].Discovered
	}, "the agent listed alive")
	require.Equal(t, "0.3", r.Agents[0].ProtocolVersion)
	res := o.run(t, "agents", "--wait", "300ms")
	require.Equal(t, cli.ExitOK, res.code, res.errOut)
	require.Contains(t, res.out, "AGENT")
	require.Regexp(t, `claude\s+ann\s+s1\s+0\.3\s+yes`, res.out)
	res = o.run(t, "agents", "--wait", "11s")
	require.Equal(t, cli.ExitUsage, res.code)
}
