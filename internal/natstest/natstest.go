package natstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds how long RunServer waits for the server to accept
// connections.
const readyTimeout = 10 * time.Second

// RunServer starts an embedded nats-server with JetStream enabled, file
// storage in t.TempDir() and a random port on 127.0.0.1. It returns once the
// server is ready for connections; the server is shut down on test cleanup.
func RunServer(t testing.TB) *server.Server {
	t.Helper()
	return RunServerWith(t, nil)
}

// RunServerWith is [RunServer] with configure applied to the options before
// the server starts (authorization, TLS); configure may be nil.
func RunServerWith(t testing.TB, configure func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	if configure != nil {
		configure(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	// Registered before Start so a failed start is still cleaned up; it runs
	// after the cleanups of connections made later (cleanups are LIFO), and
	// before t.TempDir's removal, which was registered earlier.
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		t.Fatalf("natstest: server not ready for connections after %s", readyTimeout)
	}
	return s
}

// Connect returns a connection to s and a JetStream context on it. The
// connection is closed on test cleanup.
func Connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("natstest: connect to %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Eventually calls f every tick until it returns true, and fails the test
// with msgAndArgs (a message, or a format and its arguments) if it has not
// within total. f is always called at least once.
func Eventually(t testing.TB, total, tick time.Duration, f func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		if f() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: condition not met within %s: %s", total, message(msgAndArgs))
			return
		}
		time.Sleep(tick)
	}
}

// message renders msgAndArgs the way testify does.
func message(msgAndArgs []any) string {
	switch len(msgAndArgs) {
	case 0:
		return "(no message)"
	case 1:
		if s, ok := msgAndArgs[0].(string); ok {
			return s
		}
		return fmt.Sprint(msgAndArgs[0])
	default:
		if format, ok := msgAndArgs[0].(string); ok {
			return fmt.Sprintf(format, msgAndArgs[1:]...)
		}
		return fmt.Sprint(msgAndArgs...)
	}
}
