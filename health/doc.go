// Package health tells whether sagad can do its work: whether its
// JetStream writes succeed (a run of failed writes longer than a configured
// time makes it unhealthy, logged at ERROR, shown by the
// sagad_jetstream_writes_failing gauge and by /readyz) and whether the phase
// consumers with pending work make progress (a stall, reported by /readyz).
// Both recover by themselves when writes succeed again and the consumers
// move.
package health
