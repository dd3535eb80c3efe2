// Package metrics is sagad's Prometheus instrumentation: a [Metrics]
// recorder the pipeline calls at each transition, and a [JetStreamCollector]
// that reads queue depths from JetStream when Prometheus scrapes.
//
// Both register on a registry the caller passes in, never the global one
// (sagad serves its own registry on /metrics). Names follow the Prometheus
// conventions: the sagad_ prefix, base units (seconds, bytes), _total on
// counters, _seconds on durations. Every label is a small closed set — a
// phase name, a transition outcome, a halt code, a rule number, a pause
// trigger, a verdict, a call kind and result, an admin action — and a value
// outside its set is recorded as "other". A capsule id, a subject or a halt
// reason's detail never becomes a label value: per-capsule facts belong in
// the checkpoint, the event stream and `sagactl report`.
//
// # Recorded by the pipeline ([Metrics])
//
//	name                                  type       labels
//	sagad_build_info                      gauge      version, go_version (always 1)
//	sagad_capsules_received_total         counter
//	sagad_capsules_completed_total        counter
//	sagad_capsules_halted_total           counter    reason (a halt code of PIPELINE §3, or "other")
//	sagad_capsules_cancelled_total        counter
//	sagad_transitions_total               counter    phase, outcome
//	sagad_phase_duration_seconds          histogram  phase, outcome
//	sagad_review_verdicts_total           counter    verdict
//	sagad_rule_violations_total           counter    rule (constitution number, or "other")
//	sagad_lock_wait_seconds               histogram
//	sagad_lock_contention_total           counter
//	sagad_spend_tokens_total              counter    kind (task kind), wave (none without one)
//	sagad_spend_dollars_total             counter    kind, wave
//	sagad_spend_failed_tokens_total       counter    kind, wave (charged by calls that failed)
//	sagad_spend_failed_dollars_total      counter    kind, wave
//	sagad_agent_calls_total               counter    kind (executor, reviewer), result (ok, failed, transient, accepted)
//	sagad_agent_attempts_total            counter    role (executor, reviewer), result (ok, retry, pause, halt: the failure policy's decision)
//	sagad_agent_call_duration_seconds     histogram  kind
//	sagad_redeliveries_total              counter    phase
//	sagad_pauses_total                    counter    trigger
//	sagad_resumes_total                   counter    trigger
//	sagad_admin_actions_total             counter    action
//	sagad_composition_steps               histogram  (steps per composition run, observed when it starts)
//
// Where the label set is closed (phases × outcomes, halt codes, verdicts,
// rules, triggers, kinds × results, actions) every series is created at zero
// by [New], so rate() and absent() work before the first event.
//
// The spend labels are open sets (kinds are the config's, wave ids the
// operators'): each keeps the first [MaxSpendLabelValues] values a sagad
// saw and counts the rest as "other", so no id can grow the series.
//
// Every recorder method is safe on a nil *Metrics, so code paths that run
// without metrics (tests, sagactl) need no nil checks.
//
// # Read from JetStream on scrape ([JetStreamCollector])
//
//	name                                  type       labels
//	sagad_consumer_pending_messages       gauge      phase (messages not yet delivered)
//	sagad_consumer_ack_pending_messages   gauge      phase (delivered, not yet acknowledged)
//	sagad_consumer_redelivered_messages   gauge      phase (delivered more than once, unacknowledged)
//	sagad_phase_paused                    gauge      phase (1 while the phase consumer is paused)
//	sagad_phase_paused_seconds            gauge      phase (how long it has been paused; 0 when not)
//	sagad_capsules_in_phase               gauge      phase
//	sagad_capsules_paused                 gauge      trigger
//	sagad_compositions                    gauge      state (running, paused, completed, failed, partial, cancelled, other)
//	sagad_jetstream_scrape_errors_total   counter
//
// sagad_capsules_in_phase is pending + ack_pending of the phase's durable
// consumer: the capsules queued for or being worked on by that phase, across
// every sagad sharing the NATS system. It is read from the consumer, not by
// walking checkpoints, so a scrape costs one request per phase whatever the
// number of capsules. Paused capsules are counted on their own, as
// sagad_capsules_paused by trigger: one per entry of the continuations
// bucket (zero while that bucket does not exist). Capsules in state
// waiting are there too, under the triggers dependencies and
// wave_capacity. The operator gate keeps no continuation: operator_gate
// counts the checkpoints in state waiting_for_operator, as the rescuer
// knows them (one this sagad wrote at its next look, within a quarter of
// --rescue-after; one another process wrote once it read it, quiet for
// --rescue-after, plus the rescuer's interval; the series is left out
// until the rescuer first looked, and with the rescuer disabled).
//
// sagad_compositions counts the composition records (one per run) by
// state, read with one watcher over the compositions bucket; records
// expire with the bucket's TTL, so ended runs leave the count with them.
//
// The values are the same from every sagad instance, since they describe the
// shared JetStream state; aggregate them with max(), not sum(). A failed
// read skips the series it would have produced and increments
// sagad_jetstream_scrape_errors_total; the rest of the scrape goes on.
package metrics
