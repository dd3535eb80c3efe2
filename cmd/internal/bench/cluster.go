package bench

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sagad/sagad/cmd/internal/daemon"
	"github.com/sagad/sagad/internal/loopback"
)

// startServers starts the embedded server, the way sagad's embedded mode
// does, or with cfg.Cluster above 1 an in-process cluster of that many
// nodes routed to each other on loopback; either way with file storage
// under dir, and returns once it can serve JetStream (a cluster: once a meta
// leader is elected). Servers started are returned even with an error, for
// the caller to shut down.
func startServers(cfg Config, dir string) ([]*server.Server, error) {
	n := max(cfg.Cluster, 1)
	var routes []*url.URL
	var routePorts []int
	if n > 1 {
		ports, err := loopback.FreePorts(n)
		if err != nil {
			return nil, err
		}
		routePorts = ports
		for _, p := range ports {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
		}
	}
	var nodes []*server.Server
	for i := range n {
		opts := &server.Options{
			ServerName: "sagabench",
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   dir,
			NoSigs:     true,
			NoLog:      true,
		}
		if n > 1 {
			opts.ServerName = fmt.Sprintf("sagabench-%d", i+1)
			opts.StoreDir = filepath.Join(dir, opts.ServerName)
			opts.Cluster = server.ClusterOpts{Name: "sagabench", Host: "127.0.0.1", Port: routePorts[i]}
			opts.Routes = routes
		}
		if err := daemon.ApplySync(opts, cfg.Sync); err != nil {
			return nodes, err
		}
		srv, err := server.NewServer(opts)
		if err != nil {
			return nodes, fmt.Errorf("nats-server: %w", err)
		}
		nodes = append(nodes, srv)
		go srv.Start()
		if !srv.ReadyForConnections(15 * time.Second) {
			return nodes, errors.New("nats-server did not become ready")
		}
	}
	if n == 1 {
		return nodes, nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		leaders := 0
		for _, s := range nodes {
			if s.JetStreamIsLeader() {
				leaders++
			}
		}
		if leaders == 1 {
			return nodes, nil
		}
		if time.Now().After(deadline) {
			return nodes, errors.New("cluster: no JetStream meta leader after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
