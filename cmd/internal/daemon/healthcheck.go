package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// HealthcheckCommand is the argument that makes sagad probe a running sagad
// instead of starting one: `sagad healthcheck [flags]`. A container image
// without a shell or curl (the Dockerfile's distroless base) uses it as its
// HEALTHCHECK.
const HealthcheckCommand = "healthcheck"

// healthcheckTimeout bounds the probe; /readyz itself bounds its JetStream
// checks at 2s.
const healthcheckTimeout = 5 * time.Second

// healthcheck probes the /readyz of the sagad configured by args, the
// environment and the config file — the same settings `sagad` would read, so
// a container's HEALTHCHECK finds the listener SAGAD_HTTP_LISTEN put
// wherever it is. It prints "ready" and returns 0 on 200; otherwise it
// prints why and returns 1, the only failure status Docker's HEALTHCHECK
// defines.
func healthcheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sagad healthcheck:", err)
		if isUsageError(err) {
			fmt.Fprintln(stderr, usageHint("sagad "+HealthcheckCommand))
		}
		return 1
	}
	if cfg.HTTPListen == "" {
		fmt.Fprintln(stderr, "sagad healthcheck: the HTTP listener is off (--http-listen off): nothing to probe")
		return 1
	}
	url := "http://" + probeAddr(cfg.HTTPListen) + "/readyz"
	c := &http.Client{Timeout: healthcheckTimeout}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintf(stderr, "sagad healthcheck: %s: %v\n", url, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "sagad healthcheck: %s: %s: %s\n", url, resp.Status, text)
		return 1
	}
	fmt.Fprintln(stdout, text)
	return 0
}

// probeAddr is the address to reach a listener on addr from the same
// machine: a wildcard host (empty, 0.0.0.0, ::) becomes loopback.
func probeAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
