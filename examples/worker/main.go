// Command worker is sagad's demo worker: one executor ("demo" task kind) and
// one independent reviewer ("demo-reviewer") served over NATS micro. Run it
// beside `sagad --config examples/sagad.json`; see README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/examples/worker/worker"
	"github.com/sagad/sagad/internal/natsconn"
)

func main() {
	var conn natsconn.Options
	conn.Bind(flag.CommandLine, "NATS server URL (default nats://127.0.0.1:4222, sagad's embedded server)")
	agentID := flag.String("agent-id", worker.DefaultAgentID, "name the worker signs its artifacts with")
	async := flag.Bool("async", false, `answer "accepted" and deliver results on the completion subject`)
	flag.Parse()
	conn = natsconn.FromEnv(os.Getenv).Merge(conn)
	if conn.URL == "" {
		conn.URL = nats.DefaultURL
	}
	// Run from sagad's directory, the worker uses the worker role's seed
	// that sagad wrote for its embedded server.
	conn = conn.WithDefaultNKey(natsconn.DefaultSeed(natsconn.RoleWorker))
	if err := run(conn, worker.Config{AgentID: *agentID, Async: *async}); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(conn natsconn.Options, cfg worker.Config) error {
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	nc, err := conn.Connect(nats.Name(worker.ServiceName), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	svc, err := worker.Serve(nc, cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Info("serving", "url", natsconn.Redact(nc.ConnectedUrl()), "service", worker.ServiceName, "id", svc.Info().ID)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if err := svc.Stop(); err != nil {
		return err
	}
	return nc.Drain()
}
