package pipeline

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// retentionMaxPending bounds the outcomes the retention consumer holds back
// at once. Outcomes come in time order, so the ones behind a held-back outcome
// are younger still: a small window loses nothing.
const retentionMaxPending = 256

// startRetention starts removing ended capsules Config.Retention after their
// outcome was published. The outcome stream is the to-do list, in time order:
// a durable consumer delivers each outcome; one that is too young goes back
// with a delay until it is due, then the capsule's per-key state is purged
// and the outcome acked. Every instance shares the consumer, and a purge
// repeated after a crash is harmless.
func (p *Pipeline) startRetention(ctx, workCtx context.Context) (*phaseRunner, error) {
	if p.cfg.Retention <= 0 {
		// An earlier run's consumer would hold acks pending for nothing.
		if err := p.js.DeleteConsumer(ctx, OutcomesStream, RetentionConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("retention: %w", err)
		}
		return nil, nil
	}
	if _, err := p.js.CreateOrUpdateConsumer(ctx, OutcomesStream, jetstream.ConsumerConfig{
		Durable:       RetentionConsumer,
		Description:   "sagad: removes ended capsules after the retention period",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       p.cfg.AckWait,
		MaxAckPending: retentionMaxPending,
		MaxDeliver:    -1,
	}); err != nil {
		return nil, fmt.Errorf("retention: consumer: %w", err)
	}
	r := &retention{p: p, streams: map[string]jetstream.Stream{}}
	for _, name := range []string{"KV_" + CheckpointsBucket, "KV_" + CapsulesBucket, "KV_" + ContinuationsBucket, EventsStream, "OBJ_" + ArtifactsBucket} {
		s, err := p.js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("retention: stream %s: %w", name, err)
		}
		r.streams[name] = s
	}
	return p.startConsumer(ctx, workCtx, OutcomesStream, RetentionConsumer, func(ctx context.Context, msg jetstream.Msg) {
		retry, err := r.expire(ctx, msg)
		if err != nil {
			p.log.Warn("retention will retry", "key", msg.Headers().Get(HeaderKey), "error", err)
		}
		settle(msg, retry)
	})
}

type retention struct {
	p       *Pipeline
	streams map[string]jetstream.Stream
}

// expire handles one outcome: it is held back until due, then its capsule
// is forgotten.
func (r *retention) expire(ctx context.Context, msg jetstream.Msg) (time.Duration, error) {
	md, err := msg.Metadata()
	if err != nil {
		return 0, nil // not a JetStream message: nothing to expire
	}
	if left := md.Timestamp.Add(r.p.cfg.Retention).Sub(r.p.cfg.Now()); left > 0 {
		return left, nil
	}
	key := msg.Headers().Get(HeaderKey)
	if key == "" {
		return 0, nil // not published by sagad
	}
	if err := r.forget(ctx, key); err != nil {
		return r.p.cfg.RetryDelay, err
	}
	return 0, nil
}

// forget purges every subject that holds state of the ended capsule key.
// Purging a subject removes its messages and the server's index entry for
// it, where a KV delete would leave a marker behind. The checkpoint goes
// last, so a purge cut short is found and finished by the redelivery.
func (r *retention) forget(ctx context.Context, key string) error {
	cp, _, err := r.p.checkpoints.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil // forgotten already
	}
	if err != nil {
		return err
	}
	if !cp.Terminal() {
		return nil // not ended: nothing of it may go
	}
	if cp.CapsuleID != "" {
		for cycle := 1; cycle <= cp.State.Cycle; cycle++ {
			if err := r.purgeArtifact(ctx, cp.CapsuleID+"/"+strconv.Itoa(cycle)); err != nil {
				return err
			}
		}
	}
	for _, s := range []struct{ stream, subject string }{
		{EventsStream, EventSubject(key)},
		{"KV_" + ContinuationsBucket, "$KV." + ContinuationsBucket + "." + key},
		{"KV_" + CapsulesBucket, "$KV." + CapsulesBucket + "." + key},
		{"KV_" + CheckpointsBucket, "$KV." + CheckpointsBucket + "." + key},
	} {
		if err := r.purge(ctx, s.stream, s.subject); err != nil {
			return err
		}
	}
	r.p.cache.forget(key)
	return nil
}

// purgeArtifact purges the chunks and the metadata of artifact name.
func (r *retention) purgeArtifact(ctx context.Context, name string) error {
	info, err := r.p.stores.artifacts.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("artifact %s: %w", name, err)
	}
	stream := "OBJ_" + ArtifactsBucket
	if err := r.purge(ctx, stream, "$O."+ArtifactsBucket+".C."+info.NUID); err != nil {
		return err
	}
	// The object store names metadata subjects by the base64url of the name.
	return r.purge(ctx, stream, "$O."+ArtifactsBucket+".M."+base64.URLEncoding.EncodeToString([]byte(name)))
}

func (r *retention) purge(ctx context.Context, stream, subject string) error {
	if err := r.streams[stream].Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		return fmt.Errorf("purge %s: %w", subject, err)
	}
	return nil
}
