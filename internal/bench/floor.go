package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The saga floor's names. It shares nothing with sagad's topology or the
// relay's.
const (
	floorCapsules  = "BENCH_FLOOR_CAPSULES"
	floorCP        = "BENCH_FLOOR_CHECKPOINTS"
	floorLocks     = "BENCH_FLOOR_LOCKS"
	floorTargets   = "BENCH_FLOOR_TARGETS"
	floorObjects   = "BENCH_FLOOR_OBJECTS"
	floorObjSubj   = "bench.floor.obj."
	floorOutStream = "BENCH_FLOOR_OUT"
	floorOutSubj   = "bench.floor.out"
	// headerRev carries the checkpoint's KV revision from stage to stage,
	// as sagad's process cache does.
	headerRev = "Bench-Rev"
)

func floorStream(i int) string  { return "BENCH_FLOOR_" + strconv.Itoa(i) }
func floorSubject(i int) string { return "bench.floor." + strconv.Itoa(i) }

// floorCheckpointSizes are the sizes of the checkpoints sagad writes for a
// valid capsule, in order (measured on the wire: the create at RECEPTION,
// then each phase's compare-and-set, EXECUTION's and REVIEW's claims
// included).
var floorCheckpointSizes = [...]int{637, 740, 850, 954, 1086, 1235, 1356, 1483, 1587}

// Sizes of the other values sagad writes for a valid capsule.
const (
	floorLockSize  = 177
	floorChunkSize = 536
	floorMetaSize  = 267
)

// floor is the saga floor: the relay's seven stages making, per stage, the
// JetStream requests sagad makes for a valid capsule in that phase (25 in
// all, the same kinds and sizes), with none of its logic — no decoding,
// schema, rules, claims' decisions or logs. Its throughput is the most any
// implementation making those requests could reach on this machine: what
// the saga's storage costs, apart from what its logic costs. A goroutine
// per message, like the baseline relay.
type floor struct {
	js       jetstream.JetStream
	capsules jetstream.KeyValue
	cps      jetstream.KeyValue
	locks    jetstream.KeyValue
	targets  jetstream.KeyValue
	workers  int
	runners  []*runner
}

// newFloor creates the floor's streams, consumers and buckets with the
// settings sagad uses for its own.
func newFloor(ctx context.Context, js jetstream.JetStream, workers int, ackWait, dupWindow time.Duration) (*floor, error) {
	for i := range relayStages {
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: floorStream(i), Subjects: []string{floorSubject(i)},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: dupWindow,
		}); err != nil {
			return nil, fmt.Errorf("floor: stream %s: %w", floorStream(i), err)
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, floorStream(i), jetstream.ConsumerConfig{
			Durable: relayConsumer(i), AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
			MaxDeliver: -1, MaxAckPending: 1024,
		}); err != nil {
			return nil, fmt.Errorf("floor: consumer %s: %w", relayConsumer(i), err)
		}
	}
	for _, sc := range []jetstream.StreamConfig{
		{Name: floorOutStream, Subjects: []string{floorOutSubj}, Storage: jetstream.FileStorage, Duplicates: dupWindow},
		// Like an object store: chunks and metadata, the metadata rolled up.
		{Name: floorObjects, Subjects: []string{floorObjSubj + ">"}, Storage: jetstream.FileStorage, AllowRollup: true, AllowDirect: true},
	} {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("floor: stream %s: %w", sc.Name, err)
		}
	}
	f := &floor{js: js, workers: workers}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
	}{{&f.capsules, floorCapsules}, {&f.cps, floorCP}, {&f.locks, floorLocks}, {&f.targets, floorTargets}} {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.name, Storage: jetstream.FileStorage})
		if err != nil {
			return nil, fmt.Errorf("floor: bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	if _, err := f.targets.Put(ctx, "t", []byte("target")); err != nil {
		return nil, fmt.Errorf("floor: target: %w", err)
	}
	return f, nil
}

// start runs the seven stages.
func (f *floor) start(ctx context.Context) error {
	for i := range relayStages {
		run, err := startRunner(ctx, f.js, floorStream(i), relayConsumer(i), f.workers, func(ctx context.Context, msg jetstream.Msg) {
			if err := f.hop(ctx, i, msg); err != nil {
				_ = msg.NakWithDelay(50 * time.Millisecond)
				return
			}
			_ = msg.Ack()
		})
		if err != nil {
			f.stop()
			return fmt.Errorf("floor: stage %d: %w", i, err)
		}
		f.runners = append(f.runners, run)
	}
	return nil
}

func (f *floor) stop() {
	for _, run := range f.runners {
		run.stop()
	}
	f.runners = nil
}

// hop makes stage i's requests for one message, in sagad's order.
func (f *floor) hop(ctx context.Context, stage int, msg jetstream.Msg) error {
	id := msg.Headers().Get(headerID)
	rev, _ := strconv.ParseUint(msg.Headers().Get(headerRev), 10, 64)
	cp := func(i int, rev uint64) (uint64, error) { return f.checkpoint(ctx, id, i, rev) }
	var err error
	switch stage {
	case 0: // RECEPTION: lock availability, keep the bytes, first checkpoint
		if _, err = f.locks.Get(ctx, "l-"+id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		if _, err = f.capsules.Create(ctx, id, msg.Data()); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		if rev, err = cp(0, 0); err != nil {
			return err
		}
	case 1: // REALITY_ANCHOR: the kv: target, checkpoint
		if _, err = f.targets.Get(ctx, "t"); err != nil {
			return err
		}
		if rev, err = cp(1, rev); err != nil {
			return err
		}
	case 2, 3: // PLANNING, AUTOMATED_GATES: checkpoint
		if rev, err = cp(stage, rev); err != nil {
			return err
		}
	case 4: // EXECUTION: read, lock, claim, artifact, checkpoint; lock release after the next message
		e, err := f.cps.Get(ctx, id)
		if err != nil {
			return err
		}
		if _, err = f.locks.Create(ctx, "l-"+id, pad(floorLockSize, id)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		if rev, err = cp(4, e.Revision()); err != nil {
			return err
		}
		chunk, meta := nats.NewMsg(floorObjSubj+"C."+id), nats.NewMsg(floorObjSubj+"M."+id)
		chunk.Data, meta.Data = pad(floorChunkSize, id), pad(floorMetaSize, id)
		meta.Header.Set("Nats-Rollup", "sub")
		if err := publishAsync(ctx, f.js, chunk, meta); err != nil {
			return err
		}
		if rev, err = cp(5, rev); err != nil {
			return err
		}
	case 5: // REVIEW: claim, checkpoint
		if rev, err = cp(6, rev); err != nil {
			return err
		}
		if rev, err = cp(7, rev); err != nil {
			return err
		}
	case 6: // HANDOFF: checkpoint, outcome, the bytes marked
		if _, err = cp(8, rev); err != nil {
			return err
		}
		out := f.message(floorOutSubj, id, msg.Data(), 0)
		out.Header.Set(jetstream.MsgIDHeader, id+".outcome")
		if _, err := f.js.PublishMsg(ctx, out); err != nil {
			return err
		}
		_, err = f.capsules.Put(ctx, id, msg.Data())
		return err
	}
	if _, err := f.js.PublishMsg(ctx, f.message(floorSubject(stage+1), id, msg.Data(), rev)); err != nil {
		return err
	}
	if stage == 4 {
		if err := f.locks.Purge(ctx, "l-"+id); err != nil {
			return err
		}
	}
	return nil
}

// checkpoint writes capsule id's i-th checkpoint of floorCheckpointSizes:
// a create when rev is 0, else a compare-and-set on rev.
func (f *floor) checkpoint(ctx context.Context, id string, i int, rev uint64) (uint64, error) {
	v := pad(floorCheckpointSizes[i], id)
	var n uint64
	var err error
	if rev == 0 {
		n, err = f.cps.Create(ctx, id, v)
	} else {
		n, err = f.cps.Update(ctx, id, v, rev)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		// A redelivery after a partial stage: write over it.
		return f.cps.Put(ctx, id, v)
	}
	return n, err
}

// message is a phase message as sagad sends it: the capsule's bytes with
// headers of about the same size as sagad's.
func (f *floor) message(subject, id string, data []byte, rev uint64) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(headerID, id)
	m.Header.Set(headerRev, strconv.FormatUint(rev, 10))
	m.Header.Set("Bench-Trace", strings.Repeat("t", 32))
	m.Header.Set("Bench-Key", id)
	return m
}

// pad is a JSON value of n bytes naming id.
func pad(n int, id string) []byte {
	b := make([]byte, n)
	k := copy(b, `{"capsule_id":"`+id+`","pad":"`)
	for i := k; i < n-2; i++ {
		b[i] = 'x'
	}
	copy(b[n-2:], `"}`)
	return b
}

// publishAsync publishes msgs together and waits for every ack.
func publishAsync(ctx context.Context, js jetstream.JetStream, msgs ...*nats.Msg) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// system describes the floor to the driver.
func (f *floor) system(srv *server.Server) *system {
	streams := make([]string, relayStages)
	for i := range relayStages {
		streams[i] = floorStream(i)
	}
	return &system{
		name: "floor",
		publish: func(ctx context.Context, id string, raw []byte) error {
			m := nats.NewMsg(floorSubject(0))
			m.Data = raw
			m.Header.Set(headerID, id)
			m.Header.Set(jetstream.MsgIDHeader, id)
			_, err := f.js.PublishMsg(ctx, m)
			return err
		},
		outcomeStream: floorOutStream,
		outcome: func(msg jetstream.Msg) outcome {
			return outcome{id: msg.Headers().Get(headerID), state: "relayed"}
		},
		check: func(outcome, Class) string { return "" },
		quiesce: func(ctx context.Context) error {
			return waitIdle(ctx, srv, streams)
		},
	}
}
