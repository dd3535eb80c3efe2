// Package natstest runs a real, embedded nats-server with JetStream for the
// tests of every package that talks to NATS. Each test gets its own server on a
// random loopback port with file storage in its own temporary directory, so
// tests can run in parallel and leave nothing behind.
//
// It also provides [Eventually], the one way our tests wait: poll a condition
// with a deadline, never a bare sleep.
package natstest
