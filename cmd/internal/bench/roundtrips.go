package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// RoundTrips is what one capsule of one class costs in NATS messages,
// measured by a wildcard observer: a second connection subscribed to ">"
// sees every message clients publish, and the subject (plus a KV write's
// headers) says what it was. A request, i.e. a message with a reply
// subject, costs a round trip: the client waits for JetStream's answer.
// PerCapsule counts server work and wire messages; requests sent together
// and awaited together would share one round trip's latency.
type RoundTrips struct {
	// System and Class say what was measured.
	System string `json:"system"`
	Class  string `json:"class"`
	// Capsules is how many capsules of the class the figures average over.
	Capsules int `json:"capsules"`
	// PerCapsule is the round trips per capsule, the producer's publish and
	// the benchmark's outcome reader excluded.
	PerCapsule float64 `json:"round_trips_per_capsule"`
	// OneWay is messages per capsule that wait for nothing (acks).
	OneWay float64 `json:"one_way_per_capsule"`
	// Pulls is pull requests per capsule (one fetches up to a batch).
	Pulls float64 `json:"pull_requests_per_capsule"`
	// Ops breaks PerCapsule and OneWay down by operation, per capsule.
	Ops map[string]float64 `json:"ops"`
	// Bytes is what the operations of Ops send, per capsule: payload and
	// headers as they go on the wire. The floor is held to sagad's by it.
	Bytes map[string]float64 `json:"bytes_per_capsule"`
	// Unloaded is the end-to-end latency with nothing else in flight.
	Unloaded Latency `json:"unloaded_latency"`
}

// observer counts client messages by operation.
type observer struct {
	sub *nats.Subscription
	nc  *nats.Conn

	mu     sync.Mutex
	counts map[string]int
	bytes  map[string]int
	kinds  map[string]opKind
	// marker is the subject of the sync marker in flight; seen is closed
	// when the subscription delivered it.
	marker string
	seen   chan struct{}
}

// markerPrefix is the subject prefix of the observer's own sync markers.
const markerPrefix = "_sagabench.observed."

// sync returns once the subscription has handed every message the server
// routed to it so far to the counting callback. A flush only proves the
// messages reached the client, not that the callback counted them: the
// observer publishes a marker to itself and waits for it, since one
// subscription's messages are delivered in order.
func (o *observer) sync(ctx context.Context) error {
	o.mu.Lock()
	o.marker = markerPrefix + nuid.Next()
	o.seen = make(chan struct{})
	marker, seen := o.marker, o.seen
	o.mu.Unlock()
	if err := o.nc.Publish(marker, nil); err != nil {
		return err
	}
	select {
	case <-seen:
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("round trips: observer never saw its own marker")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// opKind says how an operation is counted.
type opKind int

const (
	opRoundTrip opKind = iota
	opOneWay
	opPull
	opIgnore
)

func startObserver(url string) (*observer, *nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name("sagabench-observer"))
	if err != nil {
		return nil, nil, err
	}
	o := &observer{counts: map[string]int{}, bytes: map[string]int{}, kinds: map[string]opKind{}}
	o.nc = nc
	o.sub, err = nc.Subscribe(">", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, markerPrefix) {
			o.mu.Lock()
			if m.Subject == o.marker {
				close(o.seen)
				o.marker = ""
			}
			o.mu.Unlock()
			return
		}
		op, kind := classify(m)
		if op == "" {
			return
		}
		o.mu.Lock()
		o.counts[op]++
		o.bytes[op] += len(m.Data) + headerBytes(m.Header)
		o.kinds[op] = kind
		o.mu.Unlock()
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if err := o.sub.SetPendingLimits(-1, -1); err != nil {
		nc.Close()
		return nil, nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return o, nc, nil
}

// take returns the counts so far, with the kind of each operation, and
// starts again from zero.
func (o *observer) take() (counts, bytes map[string]int, kinds map[string]opKind) {
	o.mu.Lock()
	defer o.mu.Unlock()
	counts, bytes, kinds = o.counts, o.bytes, o.kinds
	o.counts, o.bytes, o.kinds = map[string]int{}, map[string]int{}, map[string]opKind{}
	return counts, bytes, kinds
}

// headerBytes is the size of h on the wire: "NATS/1.0" and a line per
// value, then an empty line.
func headerBytes(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// driverStreams are the streams only the benchmark itself reads.
var driverStreams = map[string]bool{"SAGA_OUTCOMES": true, relayOutStream: true, floorOutStream: true}

// classify names the operation a message observed on the wire is, and how
// it counts. Server-originated traffic (replies, deliveries, advisories) and
// the benchmark's own (producer publishes, its outcome reader) return "".
func classify(m *nats.Msg) (string, opKind) {
	subj := m.Subject
	tok := strings.Split(subj, ".")
	switch {
	case strings.HasPrefix(subj, "_INBOX."), strings.HasPrefix(subj, "$JS.EVENT."), strings.HasPrefix(subj, "$SYS."),
		strings.HasPrefix(m.Reply, "$JS.ACK."): // a delivery
		return "", opIgnore
	case subj == "saga.intake", (subj == relaySubject(0) || subj == floorSubject(0)) && m.Header.Get(jetstream.MsgIDHeader) == m.Header.Get(headerID):
		return "", opIgnore // the producer
	case strings.HasPrefix(subj, "$JS.ACK.") && len(tok) > 3:
		if driverStreams[tok[2]] {
			return "", opIgnore
		}
		if m.Reply != "" {
			return "sync ack " + tok[2], opRoundTrip
		}
		return "ack " + tok[2], opOneWay
	case strings.HasPrefix(subj, "$JS.FC."):
		return "", opIgnore
	case strings.HasPrefix(subj, "$JS.API.CONSUMER.MSG.NEXT.") && len(tok) > 6:
		if driverStreams[tok[5]] {
			return "", opIgnore
		}
		return "pull " + tok[5], opPull
	case strings.HasPrefix(subj, "$JS.API.DIRECT.GET.") && len(tok) > 4:
		return "get " + bucketOf(tok[4]), opRoundTrip
	case strings.HasPrefix(subj, "$JS.API.") && len(tok) > 3:
		api := strings.Join(tok[2:min(len(tok), 4)], ".")
		target := ""
		switch {
		case api == "STREAM.MSG" && len(tok) > 5:
			// $JS.API.STREAM.MSG.GET.<stream>: a read from the leader.
			api, target = "STREAM.MSG."+tok[4], " "+bucketOf(tok[5])
		case len(tok) > 4:
			target = " " + bucketOf(tok[4])
		}
		for s := range driverStreams {
			if strings.Contains(subj, s) {
				return "", opIgnore
			}
		}
		return "api " + api + target, opRoundTrip
	case strings.HasPrefix(subj, "$KV.") && len(tok) > 2:
		return "kv " + kvVerb(m) + " " + tok[1], kindOf(m)
	case strings.HasPrefix(subj, "$O.") && len(tok) > 3:
		what := map[string]string{"C": "chunk", "M": "meta"}[tok[2]]
		if what == "" {
			what = tok[2]
		}
		return "object " + what + " " + tok[1], kindOf(m)
	case strings.HasPrefix(subj, "saga.phase."):
		return "publish saga.phase." + tok[2], kindOf(m)
	case strings.HasPrefix(subj, "saga.events."):
		return "publish event", kindOf(m)
	case strings.HasPrefix(subj, "saga.outcome."):
		return "publish outcome", kindOf(m)
	case strings.HasPrefix(subj, "bench.relay."), strings.HasPrefix(subj, "bench.floor."):
		return "publish " + subj, kindOf(m)
	}
	return "other " + strings.Join(tok[:min(len(tok), 2)], "."), kindOf(m)
}

func kindOf(m *nats.Msg) opKind {
	if m.Reply == "" {
		return opOneWay
	}
	return opRoundTrip
}

// bucketOf strips the KV_ / OBJ_ stream prefix off a bucket's stream name.
func bucketOf(stream string) string {
	for _, p := range []string{"KV_", "OBJ_"} {
		if s, ok := strings.CutPrefix(stream, p); ok {
			return s
		}
	}
	return stream
}

// kvVerb tells a KV write's kind from its headers.
func kvVerb(m *nats.Msg) string {
	switch op := m.Header.Get("KV-Operation"); {
	case op == "DEL":
		return "delete"
	case op == "PURGE":
		return "purge"
	}
	switch m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) {
	case "":
		return "put"
	case "0":
		return "create"
	}
	return "update"
}

// classifyCounts turns observed counts into per-capsule figures.
func classifyCounts(system, class string, capsules int, counts, bytes map[string]int, kinds map[string]opKind) RoundTrips {
	rt := RoundTrips{System: system, Class: class, Capsules: capsules, Ops: map[string]float64{}, Bytes: map[string]float64{}}
	if capsules == 0 {
		return rt
	}
	for _, op := range slices.Sorted(maps.Keys(counts)) {
		per := float64(counts[op]) / float64(capsules)
		switch kinds[op] {
		case opPull:
			rt.Pulls += per
		case opOneWay:
			rt.OneWay += per
			rt.Ops[op] = per
			rt.Bytes[op] = float64(bytes[op]) / float64(capsules)
		default:
			rt.PerCapsule += per
			rt.Ops[op] = per
			rt.Bytes[op] = float64(bytes[op]) / float64(capsules)
		}
	}
	return rt
}

// measureRoundTrips drives capsules of each class one at a time (a window
// of one, so nothing else is in flight) with the observer counting, and
// returns the per-capsule figures of each class.
func measureRoundTrips(ctx context.Context, url string, t *tracker, classes []Class, perClass int, next func() uint64, stall time.Duration) ([]RoundTrips, error) {
	obs, nc, err := startObserver(url)
	if err != nil {
		return nil, fmt.Errorf("round trips: observer: %w", err)
	}
	defer nc.Close()
	var out []RoundTrips
	for _, c := range classes {
		seqs := make([]uint64, 0, perClass)
		for len(seqs) < perClass {
			if s := next(); t.gen.Class(s) == c {
				seqs = append(seqs, s)
			}
		}
		if err := t.sys.quiesce(ctx); err != nil {
			return nil, err
		}
		if err := obs.sync(ctx); err != nil {
			return nil, err
		}
		obs.take()
		b, err := t.drive(ctx, len(seqs), 1, 0, func(i int) uint64 { return seqs[i] }, stall)
		if err != nil {
			return nil, err
		}
		if err := t.sys.quiesce(ctx); err != nil {
			return nil, err
		}
		if err := obs.sync(ctx); err != nil {
			return nil, err
		}
		counts, bytes, kinds := obs.take()
		rt := classifyCounts(t.sys.name, c.String(), b.Finished, counts, bytes, kinds)
		rt.Unloaded = b.Latency
		out = append(out, rt)
	}
	return out, nil
}
