package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The baseline relay's names. It shares nothing with sagad's topology.
const (
	relayStages    = 7
	relayKV        = "BENCH_RELAY_KV"
	relayOutStream = "BENCH_RELAY_OUT"
	relayOutSubj   = "bench.relay.out"
	// relayValueSize is the size of the KV entry each stage writes, about a
	// sagad checkpoint's.
	relayValueSize = 500
	// headerID carries the capsule id through the relay.
	headerID = "Bench-Capsule-Id"
)

func relayStream(i int) string  { return "BENCH_RELAY_" + strconv.Itoa(i) }
func relaySubject(i int) string { return "bench.relay." + strconv.Itoa(i) }
func relayConsumer(i int) string {
	return "stage-" + strconv.Itoa(i)
}

// relay is the baseline: seven work-queue streams, each with a durable pull
// consumer whose handler writes one ~500 B KV entry (key = capsule id, so
// each hop overwrites the capsule's entry, as sagad's checkpoint does),
// publishes the message to the next stage, waits for that publish's ack,
// and acks its input. No decoding, validation or rules. The last stage
// publishes to an outcome stream, as sagad's HANDOFF does.
type relay struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	workers int
	runners []*runner
}

// newRelay creates the relay's streams, consumers and bucket with the same
// settings sagad uses for its own (file storage, work-queue retention,
// explicit acks, 1024 unacknowledged messages per consumer, history 1).
func newRelay(ctx context.Context, js jetstream.JetStream, workers, replicas int, ackWait, dupWindow time.Duration) (*relay, error) {
	if err := createStages(ctx, js, relayStream, relaySubject, replicas, ackWait, dupWindow); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: relayOutStream, Subjects: []string{relayOutSubj},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Duplicates: dupWindow, Replicas: replicas,
	}); err != nil {
		return nil, fmt.Errorf("relay: stream %s: %w", relayOutStream, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: relayKV, Storage: jetstream.FileStorage, Replicas: replicas})
	if err != nil {
		return nil, fmt.Errorf("relay: bucket %s: %w", relayKV, err)
	}
	return &relay{js: js, kv: kv, workers: workers}, nil
}

// createStages creates seven work-queue streams, stream(i) on subject(i),
// each with the durable pull consumer relayConsumer(i), with the settings
// sagad's phases use.
func createStages(ctx context.Context, js jetstream.JetStream, stream, subject func(int) string, replicas int, ackWait, dupWindow time.Duration) error {
	for i := range relayStages {
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: stream(i), Subjects: []string{subject(i)},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: dupWindow, Replicas: replicas,
		}); err != nil {
			return fmt.Errorf("stream %s: %w", stream(i), err)
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, stream(i), jetstream.ConsumerConfig{
			Durable: relayConsumer(i), AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
			MaxDeliver: -1, MaxAckPending: 1024,
		}); err != nil {
			return fmt.Errorf("consumer %s: %w", relayConsumer(i), err)
		}
	}
	return nil
}

// start runs the seven stages. Workers > 0 gives each stage that many
// goroutines fed by one Consume, exactly like sagad's phase runner;
// workers < 0 handles every message in a goroutine of its own.
func (r *relay) start(ctx context.Context) (err error) {
	r.runners, err = startStages(ctx, r.js, relayStream, r.workers, func(ctx context.Context, i int, msg jetstream.Msg) {
		next := relayOutSubj
		if i+1 < relayStages {
			next = relaySubject(i + 1)
		}
		r.hop(ctx, i, next, msg)
	})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

func (r *relay) stop() { stopRunners(r.runners); r.runners = nil }

// startStages starts a runner on each of the seven stages stream(i), each
// message going to handle with its stage. On failure it stops the runners
// it started.
func startStages(ctx context.Context, js jetstream.JetStream, stream func(int) string, workers int, handle func(ctx context.Context, stage int, msg jetstream.Msg)) ([]*runner, error) {
	var runners []*runner
	for i := range relayStages {
		run, err := startRunner(ctx, js, stream(i), relayConsumer(i), workers, func(ctx context.Context, msg jetstream.Msg) {
			handle(ctx, i, msg)
		})
		if err != nil {
			stopRunners(runners)
			return nil, fmt.Errorf("stage %d: %w", i, err)
		}
		runners = append(runners, run)
	}
	return runners, nil
}

func stopRunners(runners []*runner) {
	for _, run := range runners {
		run.stop()
	}
}

// hop is one stage's work on one message.
func (r *relay) hop(ctx context.Context, stage int, next string, msg jetstream.Msg) {
	id := msg.Headers().Get(headerID)
	value := make([]byte, relayValueSize)
	n := copy(value, `{"capsule_id":"`+id+`","stage":`+strconv.Itoa(stage)+`,"pad":"`)
	for i := n; i < len(value)-2; i++ {
		value[i] = 'x'
	}
	copy(value[len(value)-2:], `"}`)
	if _, err := r.kv.Put(ctx, id, value); err != nil {
		_ = msg.NakWithDelay(50 * time.Millisecond)
		return
	}
	out := nats.NewMsg(next)
	out.Data = msg.Data()
	out.Header.Set(headerID, id)
	out.Header.Set(jetstream.MsgIDHeader, id+".s"+strconv.Itoa(stage+1))
	if _, err := r.js.PublishMsg(ctx, out); err != nil {
		_ = msg.NakWithDelay(50 * time.Millisecond)
		return
	}
	_ = msg.Ack()
}

// system describes the relay to the driver.
func (r *relay) system(srv *server.Server) *system {
	return relaySystem("baseline", r.js, srv, relayStream, relaySubject(0), relayOutStream)
}

// relaySystem describes a seven-stage relay (the baseline or the floor) to
// the driver: capsules go to its first stage's subject, each ends as one
// message on its outcome stream.
func relaySystem(name string, js jetstream.JetStream, srv *server.Server, stream func(int) string, first, outStream string) *system {
	streams := make([]string, relayStages)
	for i := range relayStages {
		streams[i] = stream(i)
	}
	return &system{
		name: name,
		publish: func(ctx context.Context, id string, raw []byte) error {
			m := nats.NewMsg(first)
			m.Data = raw
			m.Header.Set(headerID, id)
			m.Header.Set(jetstream.MsgIDHeader, id)
			_, err := js.PublishMsg(ctx, m)
			return err
		},
		outcomeStream: outStream,
		outcome: func(msg jetstream.Msg) outcome {
			return outcome{id: msg.Headers().Get(headerID), state: "relayed"}
		},
		check: func(outcome, Class) string { return "" },
		quiesce: func(ctx context.Context) error {
			return waitIdle(ctx, srv, streams)
		},
	}
}

// runner consumes one durable consumer into a handler, the way sagad's
// phase runner does: Consume → channel → a fixed pool of workers, pulling
// at most as many messages as there are workers.
type runner struct {
	cc   jetstream.ConsumeContext
	work chan jetstream.Msg
	wg   sync.WaitGroup
	done context.CancelFunc
}

func startRunner(ctx context.Context, js jetstream.JetStream, stream, consumer string, workers int, handle func(context.Context, jetstream.Msg)) (*runner, error) {
	cons, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err
	}
	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &runner{done: cancel}
	var cb jetstream.MessageHandler
	var opts []jetstream.PullConsumeOpt
	if workers > 0 {
		r.work = make(chan jetstream.Msg)
		for range workers {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				for msg := range r.work {
					handle(workCtx, msg)
				}
			}()
		}
		cb = func(msg jetstream.Msg) { r.work <- msg }
		opts = append(opts, jetstream.PullMaxMessages(workers))
	} else {
		cb = func(msg jetstream.Msg) {
			r.wg.Add(1)
			go func() { defer r.wg.Done(); handle(workCtx, msg) }()
		}
	}
	opts = append(opts, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {}))
	r.cc, err = cons.Consume(cb, opts...)
	if err != nil {
		if r.work != nil {
			close(r.work)
		}
		r.wg.Wait()
		cancel()
		return nil, err
	}
	return r, nil
}

// runnerDrainGrace bounds how long stop waits for the consumer to drain.
const runnerDrainGrace = 2 * time.Second

func (r *runner) stop() {
	r.cc.Drain()
	select {
	case <-r.cc.Closed():
	case <-time.After(runnerDrainGrace):
		r.cc.Stop()
		<-r.cc.Closed()
	}
	if r.work != nil {
		close(r.work)
	}
	r.wg.Wait()
	r.done()
}
