// Package bench measures sagad against a bare JetStream floor on one
// embedded nats-server (file storage, loopback TCP), in one run, at the same
// offered load (issue 6). `go run ./cmd/sagabench` is its command line;
// BENCHMARKS.md holds the figures and their analysis.
//
// # What is measured
//
// The baseline is a seven-hop relay over the same JetStream: seven
// work-queue streams BENCH_RELAY_0…6 (subjects bench.relay.0…6), each read by
// a durable pull consumer "stage-N" whose handler writes one ~500 B entry to
// the KV bucket BENCH_RELAY_KV (key = capsule id), publishes the message to
// the next stage (the last one to the limits stream BENCH_RELAY_OUT),
// waits for that publish's ack and acks its input. No decoding, validation
// or rules. By default every message in flight is handled at once (a
// goroutine each), so the relay is the floor JetStream sets; RelayWorkers
// gives it sagad's worker pool instead.
//
// sagad is the real [pipeline.Pipeline] with the built-in stub executor and
// reviewer, fed sealed capsules of a [Generator]: a mix of capsules that
// complete in one cycle, complete after a CHANGES_REQUESTED review, halt in
// EXECUTION (executor_failed) and halt in PLANNING (spec_not_approved). Each
// capsule targets the key "t" of the KV bucket BENCH_TARGETS (a kv: target
// needs no file lock) and takes one resource lock of its own.
//
// Both get capsules through the same driver: at most Window capsules in
// flight, a new one published when one reaches its terminal state, which is
// its message on the system's outcome stream (read with an ordered
// consumer). End-to-end latency runs from the publish to that message.
//
// # Exactly once
//
// Every capsule id encodes its sequence number, so the driver keeps one
// byte per capsule: published, finished, seen again. After the runs, once
// no consumer has pending or unacknowledged messages, it checks that every
// capsule has exactly one outcome, that the outcome stream holds exactly one
// message per capsule, that each sagad outcome is the one its class must
// end in (state, cycle, halt reason), and that sampled checkpoints have the
// class's history length.
//
// # Round trips
//
// A second connection subscribed to ">" sees every message clients
// publish. Driving capsules one at a time, it counts per capsule the
// requests (round trips: KV reads and writes, publishes, JetStream API
// calls), the one-way messages (acks) and the pull requests, by operation.
package bench
