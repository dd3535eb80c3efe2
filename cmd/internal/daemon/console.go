package daemon

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/console"
	"github.com/sagad/sagad/status"
	"github.com/sagad/sagad/store"
)

// uiServer is the web console and the HTTP handler that serves it beside
// /metrics, /healthz and /readyz.
type uiServer struct {
	*console.Console
	mux http.Handler
}

// startConsole starts the web console on st, acting through the admin
// service on nc, and returns it with a handler serving it at /ui/ (and /
// redirecting there) and everything else through base.
func startConsole(ctx context.Context, cfg Config, log *slog.Logger, nc *nats.Conn, st *store.Store, calls *status.Calls, base http.Handler) (*uiServer, error) {
	c, err := console.New(st, adminsvc.NewClient(nc, adminsvc.ClientConfig{}), console.Config{
		Logger: log, Token: cfg.UIToken, BasicAuth: cfg.UIBasicAuth, TraceURL: cfg.TraceURL, Calls: calls,
	})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, c.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusFound))
	mux.Handle("/", base)
	log.Info("web console", "url", "http://"+cfg.HTTPListen+console.Prefix, "auth", authKind(cfg))
	return &uiServer{Console: c, mux: mux}, nil
}

// authKind names how the console authenticates, for the log.
func authKind(cfg Config) string {
	switch {
	case cfg.UIToken != "" && cfg.UIBasicAuth != "":
		return "token or basic"
	case cfg.UIToken != "":
		return "token"
	case cfg.UIBasicAuth != "":
		return "basic"
	}
	return "none (loopback)"
}
