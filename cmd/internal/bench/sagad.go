package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/daemon"
	"github.com/sagad/sagad/internal/logline"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// sagad is the pipeline under test, configured the way the daemon
// configures it (text logs at info through logline, a metrics recorder) except that logs
// are formatted and then discarded.
type sagad struct {
	js     jetstream.JetStream
	pipe   *pipeline.Pipeline
	client *client.Client
	reg    *prometheus.Registry
	logs   *logSink
}

func newSagad(ctx context.Context, js jetstream.JetStream, cfg Config, workspace string) (*sagad, error) {
	for _, f := range []string{"go.mod", "README.md"} {
		if err := os.WriteFile(filepath.Join(workspace, f), []byte("sagabench workspace file "+f+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("sagad: workspace: %w", err)
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: TargetsBucket, Storage: jetstream.FileStorage, Replicas: cfg.replicas()})
	if err != nil {
		return nil, fmt.Errorf("sagad: bucket %s: %w", TargetsBucket, err)
	}
	if _, err := kv.Put(ctx, TargetKey, []byte("benchmark target")); err != nil {
		return nil, fmt.Errorf("sagad: target key: %w", err)
	}
	s := &sagad{js: js, reg: prometheus.NewRegistry(), logs: &logSink{}}
	s.pipe, err = pipeline.New(ctx, js, pipeline.Config{
		Logger:          slog.New(logline.NewText(s.logs, logline.Options{Level: slog.LevelInfo})),
		Workspace:       workspace,
		KVBuckets:       []string{TargetsBucket},
		Workers:         cfg.Workers,
		Replicas:        cfg.replicas(),
		Metrics:         metrics.New(s.reg, metrics.BuildInfo{}),
		DuplicateWindow: cfg.DuplicateWindow,
		PhaseTimeout:    cfg.PhaseTimeout,
		Retention:       retention(cfg.Retention),
		// An open-loop run may queue more than a producer's default
		// backlog; the benchmark measures sagad, not the quota.
		IntakeQuota: store.IntakeQuota{MaxPending: 1 << 20},
	})
	if err != nil {
		return nil, err
	}
	s.client, err = client.NewClient(ctx, js)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *sagad) start(ctx context.Context) error { return s.pipe.Start(ctx) }

func (s *sagad) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.pipe.Stop(ctx)
}

// system describes sagad to the driver: capsules go to the intake subject
// (with a Nats-Msg-Id, as an idempotent producer sends them), terminal
// states come out of the outcome stream.
func (s *sagad) system(srv *server.Server) *system {
	streams := make([]string, capsule.NumPhases)
	for p := range capsule.Phase(capsule.NumPhases) {
		streams[p] = store.PhaseStream(p)
	}
	return &system{
		name: "sagad",
		publish: func(ctx context.Context, id string, raw []byte) error {
			m := nats.NewMsg(store.IntakeSubject)
			m.Data = raw
			m.Header.Set(jetstream.MsgIDHeader, id)
			_, err := s.js.PublishMsg(ctx, m)
			return err
		},
		outcomeStream: store.OutcomesStream,
		outcome: func(msg jetstream.Msg) outcome {
			h := msg.Headers()
			cycle, _ := strconv.Atoi(h.Get(store.HeaderCycle))
			return outcome{id: h.Get(store.HeaderCapsuleID), state: h.Get(store.HeaderState), cycle: cycle, halt: h.Get(store.HeaderHaltReason)}
		},
		check: func(o outcome, c Class) string {
			want := c.Expect()
			if o.state != string(want.State) || o.cycle != want.Cycle || o.halt != want.Halt {
				return fmt.Sprintf("ended %s (cycle %d, halt %q), want %s (cycle %d, halt %q)", o.state, o.cycle, o.halt, want.State, want.Cycle, want.Halt)
			}
			return ""
		},
		quiesce: func(ctx context.Context) error {
			return waitIdle(ctx, srv, streams)
		},
	}
}

// retention maps the benchmark's setting to the pipeline's, as sagad does.
func retention(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return daemon.DefaultRetention
	case d < 0:
		return 0
	}
	return d
}

// checkHistories reads the checkpoints of sample capsules and returns a
// problem for each whose status or history length is not its class's, and
// how many were already forgotten (retention).
func (s *sagad) checkHistories(ctx context.Context, gen *Generator, seqs []uint64) (problems []string, forgotten int) {
	for _, seq := range seqs {
		want := gen.Class(seq).Expect()
		st, err := s.client.Status(ctx, gen.ID(seq))
		switch {
		case errors.Is(err, store.ErrNotFound):
			forgotten++
		case err != nil:
			problems = append(problems, fmt.Sprintf("checkpoint of %s: %v", gen.ID(seq), err))
		case st.State != want.State || len(st.History) != want.Transitions || st.HaltReason != want.Halt:
			problems = append(problems, fmt.Sprintf("checkpoint of %s (%s): %s with %d transitions (halt %q), want %s with %d (halt %q)",
				gen.ID(seq), gen.Class(seq), st.State, len(st.History), st.HaltReason, want.State, want.Transitions, want.Halt))
		}
	}
	return problems, forgotten
}

// counters reads sagad's own metrics that speak to delivery: redeliveries
// by phase and transitions in total.
func (s *sagad) counters() (redelivered map[string]float64, transitions float64) {
	redelivered = map[string]float64{}
	mfs, err := s.reg.Gather()
	if err != nil {
		return redelivered, 0
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sagad_redeliveries_total":
			for _, m := range mf.GetMetric() {
				if v := m.GetCounter().GetValue(); v > 0 {
					for _, l := range m.GetLabel() {
						if l.GetName() == "phase" {
							redelivered[l.GetValue()] += v
						}
					}
				}
			}
		case "sagad_transitions_total":
			for _, m := range mf.GetMetric() {
				transitions += m.GetCounter().GetValue()
			}
		}
	}
	return redelivered, transitions
}

// logSink formats-and-discards sagad's log lines, counting them and
// keeping the first warnings and errors.
type logSink struct {
	mu       sync.Mutex
	lines    int
	warnings int
	first    []string
}

func (l *logSink) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines++
	if bytes.Contains(b, []byte("level=WARN")) || bytes.Contains(b, []byte("level=ERROR")) {
		l.warnings++
		if len(l.first) < maxSamples {
			l.first = append(l.first, string(bytes.TrimSpace(b)))
		}
	}
	return len(b), nil
}

func (l *logSink) snapshot() (lines, warnings int, first []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines, l.warnings, append([]string(nil), l.first...)
}
