package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// scanBatch is how many entries one request of a scan asks for.
const scanBatch = 1000

// kvOperation is the header a KV deletion or purge carries (nats.go's
// KeyValue writes it; a put has none).
const kvOperation = "KV-Operation"

// ErrScanRewound is Scan's answer when from is past the end of the
// bucket's stream: its sequences went back (a server restored from an
// older backup, the bucket deleted and made again), so a scan from where
// the last one stopped would miss every write until the stream passed
// that point again. The caller scans again from 1.
var ErrScanRewound = errors.New("scan checkpoints: the bucket's sequences went back")

// Scan sends f every checkpoint entry from the bucket's stream sequence from
// to its end, headers only, oldest first: its key, its sequence (the
// revision it was written at), when it was written and whether it is a put
// (false: a deletion, a purge, or the marker of an entry that expired). It
// returns how many entries it sent.
//
// The bucket keeps only the last revision of a key, so a scan from where
// the previous one stopped sends each key written in between once, however
// often it was written: the cost of following other processes' writes at
// an interval rather than each as it happens (sagad's rescuer).
func (s *Checkpoints) Scan(ctx context.Context, from uint64, f func(key string, seq uint64, at time.Time, put bool)) (int, error) {
	if s.js == nil {
		return 0, errors.New("scan checkpoints: a reader cannot")
	}
	stream := "KV_" + CheckpointsBucket
	cctx, cancel := readCtx(ctx, s.w)
	cons, err := s.js.CreateConsumer(cctx, stream, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: max(from, 1),
		AckPolicy: jetstream.AckNonePolicy, HeadersOnly: true, MemoryStorage: true, Replicas: 1,
		// Deleted below; left to the server if this process dies first.
		InactiveThreshold: time.Minute,
	})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("scan checkpoints: %w", err)
	}
	defer func() {
		dctx, cancel := readCtx(context.WithoutCancel(ctx), s.w)
		_ = s.js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
		cancel()
	}()
	if from > 1 && cons.CachedInfo().NumPending == 0 {
		// Nothing from from on: caught up, or the sequences went back
		// (the server does not clamp a start sequence past the end).
		if last, err := s.lastSeq(ctx, stream); err != nil {
			return 0, fmt.Errorf("scan checkpoints: %w", err)
		} else if last+1 < from {
			return 0, ErrScanRewound
		}
	}
	n := 0
	for ctx.Err() == nil {
		batch, err := cons.FetchNoWait(scanBatch)
		if err != nil {
			return n, fmt.Errorf("scan checkpoints: %w", err)
		}
		got, pending := 0, uint64(0)
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			got++
			pending = md.NumPending
			if key, put, ok := scanEntry(m.Subject(), m.Headers()); ok {
				f(key, md.Sequence.Stream, md.Timestamp, put)
			}
		}
		n += got
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return n, fmt.Errorf("scan checkpoints: %w", err)
		}
		if got == 0 || pending == 0 {
			return n, nil
		}
	}
	return n, ctx.Err()
}

// lastSeq is stream's last sequence.
func (s *Checkpoints) lastSeq(ctx context.Context, stream string) (uint64, error) {
	cctx, cancel := readCtx(ctx, s.w)
	defer cancel()
	str, err := s.js.Stream(cctx, stream)
	if err != nil {
		return 0, err
	}
	return str.CachedInfo().State.LastSeq, nil
}

// checkpointSubjects is the prefix of every checkpoint's subject.
const checkpointSubjects = "$KV." + CheckpointsBucket + "."

// scanEntry reads a checkpoint entry's subject and headers: the key it is
// under, and whether it is a put. ok is false for a subject that names no
// key sagad could have written (anyone allowed to write the bucket may
// write others; the rescuer would only read them again and again).
func scanEntry(subject string, h nats.Header) (key string, put, ok bool) {
	key, found := strings.CutPrefix(subject, checkpointSubjects)
	if !found || !ValidKey(key) {
		return "", false, false
	}
	return key, h.Get(kvOperation) == "" && h.Get(jetstream.MarkerReasonHeader) == "", true
}
