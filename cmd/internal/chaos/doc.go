// Package chaos is sagad's chaos suite: it builds sagad, nats-server and a
// logging command executor (chaosagent) into a temporary directory, runs
// them as child processes on loopback, publishes capsules while it kills
// and restarts them, and then checks what every capsule became.
//
// Scenarios: kill -9 storms of one sagad and of two, nats-server killed
// with -9 and restarted, a 3-node cluster with R3 streams losing a node and
// then the node sagad is connected to, SIGTERM under load, and a full disk
// (a tiny max_file_store, raised after a restart). For each the report
// gives capsules published (acknowledged by JetStream), terminal, lost (no
// checkpoint), stuck (not terminal when the scenario gave up waiting),
// duplicated outcomes, and the executor's calls per (capsule, cycle): a
// repeat is "after a crash" when a sagad was killed with -9 between the two
// calls, else it is a repeat by a live sagad. A scenario passes with 0
// lost, 0 duplicated, 0 stuck and 0 live repeats.
//
// cmd/sagachaos runs it; the package test runs the short suite.
package chaos
