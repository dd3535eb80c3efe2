package store

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

// markerTTL is how long a key's marker outlives the key when the server
// removes it (retention). Watchers see it when it is written; its index
// entry in the server goes with it.
const markerTTL = time.Second

// ensurePhase makes phase p's work-queue stream and durable consumer.
func ensurePhase(ctx context.Context, js jetstream.JetStream, cfg Topology, p capsule.Phase) error {
	sc := jetstream.StreamConfig{
		Name:        PhaseStream(p),
		Description: "sagad: capsules waiting for phase " + p.String(),
		Subjects:    []string{PhaseSubject(p)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
	}
	if p == capsule.Reception {
		// Producers' intake arrives on saga.intake.<producer>; the
		// quota is per subject, so per producer (IntakeQuota).
		sc.Subjects = append(sc.Subjects, IntakeProducerPrefix+"*")
		sc.Discard = jetstream.DiscardNew
		sc.DiscardNewPerSubject = true
		sc.MaxMsgsPerSubject = cfg.Quota.MaxPending
		sc.MaxMsgSize = cfg.Quota.MaxMsgBytes
		sc.MaxBytes = cfg.Quota.MaxBytes
	}
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("stream %s: %w", PhaseStream(p), err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:       ConsumerName(p),
		Description:   "sagad phase " + p.String(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 1024,
	}
	// A phase an operator paused stays paused across sagad restarts, with
	// the record of who paused it and why.
	if existing, err := js.Consumer(ctx, PhaseStream(p), ConsumerName(p)); err == nil {
		if info := existing.CachedInfo(); info != nil && info.Config.PauseUntil != nil {
			cc.PauseUntil = info.Config.PauseUntil
			if rec, found, err := capsule.PhasePauseOf(info.Config.Metadata); found && err == nil {
				cc.Metadata = rec.SetMetadata(nil)
			}
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, PhaseStream(p), cc); err != nil {
		return fmt.Errorf("consumer %s: %w", ConsumerName(p), err)
	}
	return nil
}

// ensureRecords makes the streams sagad records into besides the phases':
// events, outcomes and the completions of external work.
func ensureRecords(ctx context.Context, js jetstream.JetStream, cfg Topology) error {
	for _, sc := range []jetstream.StreamConfig{
		{Name: EventsStream, Description: "sagad: lifecycle events per capsule", Subjects: []string{EventsPrefix + ">"}},
		{Name: OutcomesStream, Description: "sagad: completed, halted and cancelled capsules with their original bytes", Subjects: []string{OutcomePrefix + ">"}},
	} {
		sc.Retention = jetstream.LimitsPolicy
		sc.Storage = cfg.Storage
		sc.Replicas = cfg.Replicas
		sc.Duplicates = cfg.DuplicateWindow
		if sc.Name == EventsStream && cfg.Retention > 0 {
			sc.MaxAge = cfg.Retention // events are kept for the retention
			sc.Duplicates = min(sc.Duplicates, cfg.Retention)
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: CompletionsStream, Description: "sagad: results of accepted external work",
		Subjects: []string{executors.CompletionPrefix + ">"}, Retention: jetstream.WorkQueuePolicy,
		Storage: cfg.Storage, Replicas: cfg.Replicas, Duplicates: cfg.DuplicateWindow,
	}); err != nil {
		return fmt.Errorf("stream %s: %w", CompletionsStream, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, CompletionsStream, jetstream.ConsumerConfig{
		Durable: CompletionsConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: cfg.AckWait, MaxDeliver: -1,
	}); err != nil {
		return fmt.Errorf("consumer %s: %w", CompletionsConsumer, err)
	}
	return nil
}

// ensureTopology creates or updates every stream, consumer and bucket sagad
// needs. It is idempotent, so every sagad instance runs it at start. It
// also runs first over a JetStream that only compares (PlanTopology), where
// a creation returns nil for what does not exist yet.
func ensureTopology(ctx context.Context, js jetstream.JetStream, cfg Topology) (*stores, error) {
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		if err := ensurePhase(ctx, js, cfg, p); err != nil {
			return nil, err
		}
	}
	if err := ensureRecords(ctx, js, cfg); err != nil {
		return nil, err
	}
	var s stores
	var err error
	if s.checkpoints, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: CheckpointsBucket, Description: "sagad: checkpoint per capsule key", Storage: cfg.Storage, Replicas: cfg.Replicas,
		LimitMarkerTTL: markerTTL, // allows the per-message TTL of retention
		// sagactl's admin actions end capsules too: they read the retention
		// sagad runs with from here.
		Metadata: map[string]string{RetentionMetadata: cfg.Retention.String()},
	}); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", CheckpointsBucket, err)
	}
	if s.capsules, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: CapsulesBucket, Description: "sagad: capsule bytes as received, per key", Storage: cfg.Storage, Replicas: cfg.Replicas,
		LimitMarkerTTL: markerTTL,
	}); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", CapsulesBucket, err)
	}
	if s.capsulesStream, err = js.Stream(ctx, "KV_"+CapsulesBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", CapsulesBucket, err)
	}
	if s.continuations, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: ContinuationsBucket, Description: "sagad: continuation per paused capsule key", Storage: cfg.Storage, Replicas: cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", ContinuationsBucket, err)
	}
	if s.chains, err = ensureCompositions(ctx, js, cfg); err != nil {
		return nil, err
	}
	if s.artifacts, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: ArtifactsBucket, Description: "sagad: artifacts per capsule and cycle", Storage: cfg.Storage, Replicas: cfg.Replicas,
		TTL: cfg.Retention, // kept for the retention after they were written
	}); err != nil {
		return nil, fmt.Errorf("object store %s: %w", ArtifactsBucket, err)
	}
	// The object store's settings: a record is kept as long in either form.
	if s.artifactRecords, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: ArtifactRecordsBucket, Description: "sagad: artifact records of one message per capsule and cycle",
		Storage: cfg.Storage, Replicas: cfg.Replicas, History: 1, TTL: cfg.Retention,
	}); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", ArtifactRecordsBucket, err)
	}
	return &s, nil
}

type stores struct {
	checkpoints jetstream.KeyValue
	capsules    jetstream.KeyValue
	// capsulesStream is SAGA_CAPSULES's stream, for the headers of its
	// entries (the KV client does not return them).
	capsulesStream jetstream.Stream
	continuations  jetstream.KeyValue
	artifacts      jetstream.ObjectStore
	// artifactRecords is nil in a store Opened over an older topology.
	artifactRecords jetstream.KeyValue
	chains          jetstream.KeyValue
}
