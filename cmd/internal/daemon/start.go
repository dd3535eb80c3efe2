package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/store"
)

// Backoff between start attempts: from startRetryMin, doubled after each
// failed attempt, at most startRetryMax. The cap is what a cluster that
// has just come up waits for sagad at worst: at most a second, so sagad
// serves within 5 s of its NATS being able to (an attempt costs one
// connection, or one stream lookup per stream, which any server bears
// once a second).
const (
	startRetryMin = 250 * time.Millisecond
	startRetryMax = time.Second
)

// nextStartDelay is the backoff after an attempt that waited delay.
func nextStartDelay(delay time.Duration) time.Duration {
	return min(2*delay, startRetryMax)
}

// startGate is the HTTP handler while sagad starts: the listener is bound
// before NATS answers, so /readyz can say why sagad is not serving yet and
// a port in use is found before anything is changed. Once sagad serves,
// every request goes to the handler set with serve.
type startGate struct {
	h      atomic.Pointer[http.Handler]
	reason atomic.Pointer[string]
}

func newStartGate() *startGate {
	g := &startGate{}
	g.wait("connecting to NATS")
	return g
}

// wait sets the reason /readyz gives while sagad starts.
func (g *startGate) wait(reason string) { g.reason.Store(&reason) }

// serve hands every request to h from now on.
func (g *startGate) serve(h http.Handler) { g.h.Store(&h) }

func (g *startGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := g.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	reason := *g.reason.Load()
	switch r.URL.Path {
	case "/healthz":
		// The process is alive and doing what it should: waiting. A
		// liveness probe that restarted it would not make NATS come sooner.
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	case "/readyz":
		http.Error(w, "not ready: starting: "+reason, http.StatusServiceUnavailable)
	default:
		http.Error(w, "sagad is starting: "+reason, http.StatusServiceUnavailable)
	}
}

// starter retries the steps of sagad's start that wait for NATS: one INFO
// line per kind of failure (not per attempt), the reason on /readyz, and
// the last cause when the start timeout ends the wait.
type starter struct {
	log     *slog.Logger
	gate    *startGate // nil without HTTP
	timeout time.Duration
	class   string
	last    error
}

// errStartTimeout is returned when the start timeout ended the wait.
var errStartTimeout = errors.New("not started within --start-timeout")

// retry runs attempt until it succeeds, fails permanently (see
// startFailure) or ctx ends. ctx carries the start timeout, if any: when it
// ends that way, retry logs one ERROR line with the last cause and returns
// an error wrapping errStartTimeout; when the parent (shutdown) ends it,
// retry returns ctx's error.
func (s *starter) retry(ctx context.Context, stage string, attempt func(context.Context) error) error {
	delay := startRetryMin
	for {
		err := attempt(ctx)
		if err == nil {
			if s.class != "" {
				s.log.Info("waited for "+stage+": done", "last_cause", s.class)
				s.class = ""
			}
			return nil
		}
		if ctx.Err() == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.last = err
		}
		if ctx.Err() != nil {
			return s.ended(ctx)
		}
		class, wait := startFailure(err)
		if !wait {
			return err
		}
		if class != s.class {
			s.class = class
			s.log.Info("waiting for "+stage, "cause", class, "error", err,
				"retry", fmt.Sprintf("backoff %s up to %s", startRetryMin, startRetryMax))
		} else {
			s.log.Debug("waiting for "+stage, "cause", class, "error", err, "retry_in", delay)
		}
		if s.gate != nil {
			s.gate.wait(stage + ": " + class + ": " + err.Error())
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.ended(ctx)
		case <-t.C:
		}
		delay = nextStartDelay(delay)
	}
}

func (s *starter) ended(ctx context.Context) error {
	if context.Cause(ctx) != errStartTimeout {
		return ctx.Err()
	}
	last := "none"
	if s.last != nil {
		last = s.last.Error()
	}
	s.log.Error("sagad did not start within --start-timeout", "start_timeout", s.timeout, "last_cause", last)
	return fmt.Errorf("%w %s: last cause: %s", errStartTimeout, s.timeout, last)
}

// startFailure sorts an error of sagad's start: wait reports whether it is
// one to wait out (NATS not up yet, a cluster forming or without a leader),
// class names its kind for the log. Everything else is permanent (sagad
// exits at once): refused credentials, TLS, a server too old, JetStream
// not enabled for the account, a stream or bucket that differs from the
// flags (store.DriftError), a request the server rejects as invalid.
// Retrying those cannot succeed without someone changing a configuration.
func startFailure(err error) (class string, wait bool) {
	var drift *store.DriftError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.As(err, &drift):
		return "existing streams and buckets differ", false
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired), strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return "credentials refused", false
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr),
		errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return "TLS", false
	case errors.Is(err, nats.ErrNoServers):
		return "no NATS server answers", true
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return "JetStream not enabled for the account", false
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "JetStream not answering (not ready yet, or its cluster has no meta leader)", true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "JetStream requests time out", true
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return "NATS connection lost", true
	}
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		switch je.APIError().ErrorCode {
		case 10005: // no suitable peers for placement
			return "the cluster cannot place the streams yet (no suitable peers)", true
		case 10023: // insufficient resources
			return "the cluster has insufficient resources yet", true
		case 10008, 10009: // JetStream system temporarily unavailable, cluster cannot handle request
			return "the JetStream cluster is not available yet", true
		case 10118: // stream is offline
			return "a stream is offline", true
		}
		return "", false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "NATS requests time out", true
	}
	return "", false
}
