// Command agents runs two agents speaking the Agent Protocol for NATS
// (v0.3): "author" (an executor: it drafts a Markdown answer) and "critic"
// (a reviewer: it asks for one change on a first draft, then approves).
// Each logs in with the seed sagad wrote for its role, as any stock agent
// host would. Run it beside `sagad --config examples/agents/sagad.json`;
// see README.md. The agents' logic is canned: the point is the wire.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/examples/agents/demo"
	"github.com/sagad/sagad/internal/agenttest"
	"github.com/sagad/sagad/internal/natsconn"
)

func main() {
	var conn natsconn.Options
	conn.Bind(flag.CommandLine, "NATS server URL (default nats://127.0.0.1:4222, sagad's embedded server)")
	owner := flag.String("owner", "demo", "the agents' owner (the fourth subject token)")
	flag.Parse()
	conn = natsconn.FromEnv(os.Getenv).Merge(conn)
	if conn.URL == "" {
		conn.URL = nats.DefaultURL
	}
	if err := run(conn, *owner); err != nil {
		fmt.Fprintln(os.Stderr, "agents:", err)
		os.Exit(1)
	}
}

func run(conn natsconn.Options, owner string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, a := range []struct {
		role string
		cfg  agenttest.Config
	}{
		{demo.AuthorRole, agenttest.Config{Agent: "author", Owner: owner, Heartbeat: 30 * time.Second, Handler: demo.Author}},
		{demo.CriticRole, agenttest.Config{Agent: "critic", Owner: owner, Heartbeat: 30 * time.Second, Handler: demo.Critic}},
	} {
		// Run from sagad's directory, each agent uses the seed sagad
		// wrote for its role; credentials given by flag or env win.
		nc, err := conn.WithDefaultNKey(natsconn.DefaultSeed(a.role)).Connect(nats.Name(a.role))
		if err != nil {
			return fmt.Errorf("%s: %w", a.role, err)
		}
		defer nc.Close()
		h, err := agenttest.Start(nc, a.cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", a.role, err)
		}
		defer h.Stop()
		fmt.Printf("%s serves %s\n", a.role, h.Subject())
	}
	<-ctx.Done()
	return nil
}
