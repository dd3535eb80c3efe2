// Command worker is sagad's demo worker: one executor ("demo" task kind) and
// one independent reviewer ("demo-reviewer") served over NATS micro. Run it
// beside `sagad --config examples/sagad.json`; see README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sagad/sagad/examples/worker/worker"
	"github.com/sagad/sagad/internal/natsconn"
)

// The seeds sagad writes for the demo's two endpoints (examples/sagad.json):
// each kind logs in with its own, into a NATS account of its own.
var (
	defaultExecutorSeed = natsconn.DefaultSeed("executor-demo")
	defaultReviewerSeed = natsconn.DefaultSeed("reviewer-demo-reviewer")
)

func main() {
	var conn natsconn.Options
	conn.Bind(flag.CommandLine, "NATS server URL (default nats://127.0.0.1:4222, sagad's embedded server)")
	agentID := flag.String("agent-id", worker.DefaultAgentID, "name the worker signs its artifacts with")
	async := flag.Bool("async", false, `answer "accepted" and deliver results on the completion subject`)
	serve := flag.String("serve", "both", "endpoints to serve: execute, review or both (each on a connection of its own)")
	executorSeed := flag.String("executor-nkey", envOr("SAGA_EXECUTOR_NKEY", defaultExecutorSeed), "NKey seed of the executor's credentials, used when no other credentials are given (env SAGA_EXECUTOR_NKEY)")
	reviewerSeed := flag.String("reviewer-nkey", envOr("SAGA_REVIEWER_NKEY", defaultReviewerSeed), "NKey seed of the reviewer's credentials, used when no other credentials are given (env SAGA_REVIEWER_NKEY)")
	flag.Parse()
	conn = natsconn.FromEnv(os.Getenv).Merge(conn)
	if conn.URL == "" {
		conn.URL = nats.DefaultURL
	}
	roles := map[string]string{"execute": *executorSeed, "review": *reviewerSeed}
	var only []string
	switch *serve {
	case "both":
		only = []string{"execute", "review"}
	case "execute", "review":
		only = []string{*serve}
	default:
		fmt.Fprintf(os.Stderr, "worker: --serve %q: want execute, review or both\n", *serve)
		os.Exit(2)
	}
	// Run from sagad's directory, each endpoint uses the seed sagad wrote
	// for it; credentials given by flag or environment win.
	conns := map[string]natsconn.Options{}
	for _, ep := range only {
		conns[ep] = conn.WithDefaultNKey(roles[ep])
	}
	if err := run(conns, worker.Config{AgentID: *agentID, Async: *async}); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(conns map[string]natsconn.Options, cfg worker.Config) error {
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	var svcs []micro.Service
	var ncs []*nats.Conn
	defer func() {
		for _, nc := range ncs {
			nc.Close()
		}
	}()
	for ep, conn := range conns {
		nc, err := conn.Connect(nats.Name(worker.ServiceName+"-"+ep), nats.MaxReconnects(-1))
		if err != nil {
			return fmt.Errorf("%s: %w", ep, err)
		}
		ncs = append(ncs, nc)
		c := cfg
		c.Only = ep
		svc, err := worker.Serve(nc, c)
		if err != nil {
			return err
		}
		svcs = append(svcs, svc)
		cfg.Logger.Info("serving", "url", natsconn.Redact(nc.ConnectedUrl()), "service", worker.ServiceName, "endpoint", ep, "id", svc.Info().ID)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	var errs []error
	for _, svc := range svcs {
		errs = append(errs, svc.Stop())
	}
	for _, nc := range ncs {
		errs = append(errs, nc.Drain())
	}
	return errors.Join(errs...)
}
