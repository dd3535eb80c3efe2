package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/jspub"
)

// The saga floor's names. It shares nothing with sagad's topology or the
// relay's.
const (
	floorCapsules  = "BENCH_FLOOR_CAPSULES"
	floorCP        = "BENCH_FLOOR_CHECKPOINTS"
	floorLocks     = "BENCH_FLOOR_LOCKS"
	floorTargets   = "BENCH_FLOOR_TARGETS"
	floorArtifacts = "BENCH_FLOOR_ARTIFACTS"
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
// then each phase's compare-and-set, EXECUTION's claim included). They
// follow sagad's checkpoints as these grow: TestSmoke holds every request
// of the floor to sagad's in bytes (RoundTrips.Bytes). The second, third
// and fourth, REALITY_ANCHOR's, PLANNING's and AUTOMATED_GATES' own
// writes, are no longer made (issue 36: EXECUTION's claim writes their
// advances), nor is REVIEW's claim (EXECUTION's result write takes it,
// hence that write's size).
var floorCheckpointSizes = [...]int{599, 641, 696, 738, 990, 1095, 1157, 1207}

// Sizes of the other values sagad writes for a valid capsule.
const (
	floorLockSize = 213
	// floorRecordSize is the artifact record's, one KV put (issue 36:
	// before, an object store chunk of these bytes and its 268-byte
	// metadata).
	floorRecordSize = 541
)

// floor is the saga floor: the relay's seven stages making, per stage, the
// JetStream requests sagad makes for a valid capsule in that phase (20 in
// all, the same kinds, sizes, headers and order, made as sagad makes them:
// writes through internal/jspub's Writes, reads as direct gets, each with
// its deadline in the request), with none of its logic — no decoding, schema,
// rules, claims' decisions or logs. Its throughput is the most any
// implementation making those requests could reach on this machine: what
// the saga's storage costs, apart from what its logic costs. A goroutine
// per message, like the baseline relay.
type floor struct {
	// raw holds each capsule's bytes from stage 0 to the outcome, as
	// sagad's process cache does: its phase messages carry no body.
	raw      sync.Map
	js       jetstream.JetStream
	nc       *nats.Conn
	capsules jetstream.KeyValue
	cps      jetstream.KeyValue
	locks    jetstream.KeyValue
	targets  jetstream.KeyValue
	workers  int
	runners  []*runner
	// w makes the floor's writes as sagad's are made: the deadline in the
	// request, no context per write (nil: jspub.DefaultTimeout, no
	// observer).
	w *jspub.Writes
}

// get reads key's last entry of bucket as sagad's reads are made: a direct
// get with its deadline in the request (jspub.KVReader), no context of its
// own. A key never written (404) is no error. Written out rather than
// through jspub.KVReader so that this file builds in older trees too
// (FLOOR=new scripts/bench-ab.sh measures old builds against it).
func (f *floor) get(bucket, key string) error {
	m, err := f.nc.Request("$JS.API.DIRECT.GET.KV_"+bucket+".$KV."+bucket+"."+key, nil, jspub.DefaultTimeout)
	if err != nil {
		return fmt.Errorf("floor: get %s %s: %w", bucket, key, err)
	}
	if st := m.Header.Get("Status"); st != "" && st != "404" {
		return fmt.Errorf("floor: get %s %s: status %s %s", bucket, key, st, m.Header.Get("Description"))
	}
	return nil
}

// newFloor creates the floor's streams, consumers and buckets with the
// settings sagad uses for its own (file storage, work queues, history 1,
// per-message TTLs with 1 s markers).
func newFloor(ctx context.Context, js jetstream.JetStream, workers, replicas int, ackWait, dupWindow time.Duration) (*floor, error) {
	if err := createStages(ctx, js, floorStream, floorSubject, replicas, ackWait, dupWindow); err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	for _, sc := range []jetstream.StreamConfig{
		{Name: floorOutStream, Subjects: []string{floorOutSubj}, Storage: jetstream.FileStorage, Duplicates: dupWindow},
	} {
		sc.Replicas = replicas
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("floor: stream %s: %w", sc.Name, err)
		}
	}
	f := &floor{js: js, nc: js.Conn(), workers: workers}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
	}{{&f.capsules, floorCapsules}, {&f.cps, floorCP}, {&f.locks, floorLocks}, {&f.targets, floorTargets}} {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.name, Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second, Replicas: replicas})
		if err != nil {
			return nil, fmt.Errorf("floor: bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	// The artifact records' bucket, as sagad's: history 1, kept for the
	// retention.
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: floorArtifacts, Storage: jetstream.FileStorage, Replicas: replicas, History: 1, TTL: floorRetention,
	}); err != nil {
		return nil, fmt.Errorf("floor: bucket %s: %w", floorArtifacts, err)
	}
	if _, err := f.targets.Put(ctx, "t", []byte("target")); err != nil {
		return nil, fmt.Errorf("floor: target: %w", err)
	}
	return f, nil
}

// start runs the seven stages.
func (f *floor) start(ctx context.Context) (err error) {
	f.runners, err = startStages(ctx, f.js, floorStream, f.workers, func(ctx context.Context, i int, msg jetstream.Msg) {
		if err := f.hop(ctx, i, msg); err != nil {
			_ = msg.NakWithDelay(50 * time.Millisecond)
			return
		}
		_ = msg.Ack()
	})
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	return nil
}

func (f *floor) stop() { stopRunners(f.runners); f.runners = nil }

// hop makes stage i's requests for one message, in sagad's order.
func (f *floor) hop(ctx context.Context, stage int, msg jetstream.Msg) error {
	id := msg.Headers().Get(headerID)
	rev, _ := strconv.ParseUint(msg.Headers().Get(headerRev), 10, 64)
	cp := func(i int, rev uint64, ttl time.Duration) (uint64, error) { return f.checkpoint(ctx, id, i, rev, ttl) }
	var err error
	var lockRev uint64
	switch stage {
	case 0: // RECEPTION: keep the bytes, first checkpoint (lock availability: sagad's watch of the locks; a reserved step id: only version 8 ids are looked up, no request for a producer's)
		if _, err = f.w.KVCreate(ctx, f.nc, f.capsules, id, msg.Data()); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		f.raw.Store(id, msg.Data())
		if rev, err = cp(0, 0, 0); err != nil {
			return err
		}
	case 1, 2, 3: // REALITY_ANCHOR, PLANNING, AUTOMATED_GATES: no checkpoint (their advances are written with EXECUTION's claim)
	case 4: // EXECUTION: REALITY_ANCHOR's kv: target (decided at its catch-up), lock, claim (on the cached revision), artifact, checkpoint; lock release alongside the next message
		if err = f.get(floorTargets, "t"); err != nil {
			return err
		}
		if lockRev, err = f.w.KVUpdate(ctx, f.nc, f.locks, "l-"+id, pad(floorLockSize, id), 0); cas.Conflict(err) {
			// A redelivery after a partial stage: the lock is ours.
			e, gerr := f.locks.Get(ctx, "l-"+id)
			if gerr != nil {
				return gerr
			}
			lockRev, err = e.Revision(), nil
		}
		if err != nil {
			return err
		}
		if rev, err = cp(4, rev, 0); err != nil {
			return err
		}
		// The artifact's record, one put as sagad writes it.
		record := nats.NewMsg("$KV." + floorArtifacts + "." + id + "/1")
		record.Data = pad(floorRecordSize, id)
		if _, err := f.w.Publish(ctx, f.nc, record); err != nil {
			return err
		}
		if rev, err = cp(5, rev, 0); err != nil {
			return err
		}
	case 5: // REVIEW: checkpoint (its claim was taken by EXECUTION's result write)
		if rev, err = cp(6, rev, 0); err != nil {
			return err
		}
	case 6: // HANDOFF: checkpoint, outcome, the bytes marked
		// The end, with the retention as its time to live.
		if _, err = cp(7, rev, floorRetention); err != nil {
			return err
		}
		raw, ok := f.raw.Load(id)
		if !ok {
			e, err := f.capsules.Get(ctx, id)
			if err != nil {
				return err
			}
			raw = e.Value()
		}
		out := f.message(floorOutSubj, id, raw.([]byte), 0)
		out.Header.Set(jetstream.MsgIDHeader, id+".outcome")
		// And what an outcome adds: the capsule's key, trace id and phase
		// (no longer in a phase message), its state, artifacts and
		// constitution.
		out.Header.Set("Bench-Trace", strings.Repeat("t", 32))
		out.Header.Set("Bench-Key", id)
		out.Header.Set("Bench-Phase", "6")
		out.Header.Set("Bench-State", "completed")
		out.Header.Set("Bench-Artifacts", "artifact:"+id+"/1")
		out.Header.Set("Bench-Constitution", strings.Repeat("c", 19))
		if _, err := f.w.Publish(ctx, f.nc, out); err != nil {
			return err
		}
		mark := nats.NewMsg("$KV." + floorCapsules + "." + id)
		mark.Data = raw.([]byte)
		mark.Header.Set("Saga-Outcome-Sent", "true")
		mark.Header.Set(jetstream.MsgTTLHeader, floorRetention.String())
		if _, err = f.w.Publish(ctx, f.nc, mark); err == nil {
			f.raw.Delete(id)
		}
		return err
	}
	var released chan error
	if stage == 4 {
		released = make(chan error, 1)
		go func() { _, err := f.w.KVPurge(ctx, f.nc, f.locks, "l-"+id, lockRev, time.Second); released <- err }()
	}
	next := f.message(floorSubject(stage+1), id, nil, rev)
	if stage >= 1 && stage <= 3 {
		// The deferred advances the message names, as sagad's Saga-Deferred.
		next.Header.Set("Bench-Deferred", floorDeferred[:22*stage-1])
	}
	if stage == 4 {
		// The claim REVIEW's first delivery adopts, as sagad's Saga-Claim.
		next.Header.Set("Bench-Claim", floorClaim)
	}
	_, err = f.w.Publish(ctx, f.nc, next)
	if released != nil {
		if rerr := <-released; err == nil {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	return nil
}

// floorDeferred is a Saga-Deferred header's size: "<phase>:<unix ns>" per
// deferred phase, comma separated.
const floorDeferred = "1:1764300000000000000,2:1764300000000000000,3:1764300000000000000"

// floorClaim is a Saga-Claim header's size: "<unix ns>:<holder>", the
// holder an instance id as sagad makes one (host-pid-8 characters), "/"
// and a nuid-shaped id.
var floorClaim = func() string {
	host, _ := os.Hostname()
	return "1764300000000000000:" + host + "-" + strconv.Itoa(os.Getpid()) + "-" + strings.Repeat("i", 8) + "/" + strings.Repeat("n", 22)
}()

// floorRetention is sagad's default retention, the time to live of an ended
// capsule's last checkpoint and bytes.
const floorRetention = 168 * time.Hour

// checkpoint writes capsule id's i-th checkpoint of floorCheckpointSizes:
// a compare-and-set on rev (0: a create), with a time to live when ttl > 0.
func (f *floor) checkpoint(ctx context.Context, id string, i int, rev uint64, ttl time.Duration) (uint64, error) {
	m := nats.NewMsg("$KV." + floorCP + "." + id)
	m.Data = pad(floorCheckpointSizes[i], id)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
	}
	n, err := f.w.Publish(ctx, f.nc, m)
	if cas.Conflict(err) {
		// A redelivery after a partial stage: write over it.
		return f.cps.Put(ctx, id, m.Data)
	}
	return n, err
}

// message is a phase message as sagad sends it (no body, headers of about
// the same size as sagad's: its key and cycle), or with data the outcome.
func (f *floor) message(subject, id string, data []byte, rev uint64) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(headerID, id)
	m.Header.Set(headerRev, strconv.FormatUint(rev, 10))
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

// system describes the floor to the driver.
func (f *floor) system(srv *server.Server) *system {
	return relaySystem("floor", f.js, srv, floorStream, floorSubject(0), floorOutStream)
}
