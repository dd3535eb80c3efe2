// Package agenttest is an agent host speaking the Agent Protocol for NATS
// (v0.3), written in Go from the protocol's public description, for
// tests and the runnable example in examples/agents: it registers the
// "agents" micro service (prompt and status endpoints, queue group
// "agents"), publishes heartbeats, and streams what a [Handler] writes: a
// leading ack, keep-alives, response chunks in both forms, queries with
// their answers, unknown chunk types, error frames and the terminator.
package agenttest
