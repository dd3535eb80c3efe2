package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/locks"
)

// Change is one setting of an existing stream or bucket that differs from
// what sagad's configuration asks for.
type Change struct {
	// Kind is "stream", "bucket" (key-value) or "object store".
	Kind string
	// Name is the stream's or bucket's name.
	Name string
	// Setting is what differs: replicas, storage, retention, subjects,
	// max age, duplicates, history, marker ttl.
	Setting string
	// Found is the value on the server, Asked the value sagad would set.
	Found, Asked string
	// Flag is the sagad flag (with its value) that would ask for what exists,
	// or "" when no flag sets this setting.
	Flag string
	// Upgrade marks a change that only adds what a newer sagad needs (a
	// subject, limit markers) and weakens nothing: it is applied without
	// --migrate and logged.
	Upgrade bool
}

// String names the change and how to resolve it, in the words of sagad's
// refusal: "stream SAGA_PHASE_1: replicas 3, asked 1 (start with --replicas
// 3, or --migrate to change it)".
func (c Change) String() string {
	s := fmt.Sprintf("%s %s: %s %s, asked %s", c.Kind, c.Name, c.Setting, c.Found, c.Asked)
	switch {
	case c.Upgrade:
		return s + " (an upgrade: applied)"
	case c.Flag != "":
		return s + " (start with " + c.Flag + ", or --migrate to change it)"
	}
	return s + " (no flag sets it: --migrate to change it)"
}

// DriftError is sagad's refusal to change existing streams and buckets it
// was not asked to change (see [Topology.Migrate]). Nothing was changed.
type DriftError struct {
	// Changes are the differences that need --migrate.
	Changes []Change
}

func (e *DriftError) Error() string {
	lines := make([]string, 0, len(e.Changes)+1)
	lines = append(lines, fmt.Sprintf("%d setting(s) of existing streams and buckets differ from what sagad is asked for; nothing was changed:", len(e.Changes)))
	for _, c := range e.Changes {
		lines = append(lines, "  "+c.String())
	}
	return strings.Join(lines, "\n")
}

// PlanTopology compares the streams and buckets that exist with those
// [Ensure] would create or update with cfg, and returns every difference in
// a setting sagad relies on. It changes nothing: it runs the same code as
// Ensure over a JetStream whose creations and updates only record what
// they were asked, so a stream or bucket added to the topology is compared
// without being listed here.
func PlanTopology(ctx context.Context, js jetstream.JetStream, cfg Topology) ([]Change, error) {
	cfg = cfg.withDefaults()
	p := &planJS{JetStream: js, retention: cfg.Retention}
	if _, err := ensureTopology(ctx, p, cfg); err != nil {
		return nil, err
	}
	if _, err := locks.New(ctx, p, locks.Config{Lease: cfg.LockLease, Replicas: cfg.Replicas, Storage: cfg.Storage}); err != nil {
		return nil, err
	}
	if _, err := budget.New(ctx, p, budget.Config{Replicas: cfg.Replicas, Storage: cfg.Storage}); err != nil {
		return nil, err
	}
	return p.changes, nil
}

// planJS is a JetStream whose creations and updates of streams, buckets
// and consumers compare instead of writing. Reads pass through.
type planJS struct {
	jetstream.JetStream
	retention time.Duration
	changes   []Change
}

// stream compares the stream asked for with the one that exists and
// returns that one, or nil when it does not exist (it would be created:
// nothing that exists changes). The topology code must not use what a
// creation returns before the creations are done.
func (p *planJS) stream(ctx context.Context, kind, name string, asked jetstream.StreamConfig, ttlName string) (jetstream.Stream, error) {
	s, err := p.JetStream.Stream(ctx, asked.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p.changes = append(p.changes, compareStream(kind, name, s.CachedInfo().Config, asked, p.retention, ttlName)...)
	return s, nil
}

func (p *planJS) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return p.stream(ctx, "stream", cfg.Name, cfg, "max age")
}

func (p *planJS) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return p.CreateOrUpdateStream(ctx, cfg)
}

func (p *planJS) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return p.CreateOrUpdateStream(ctx, cfg)
}

// Stream answers a stream that does not exist yet with nil: the plan goes
// on as if the creation before it had happened.
func (p *planJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := p.JetStream.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	return s, err
}

func (p *planJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if s, err := p.stream(ctx, "bucket", cfg.Bucket, kvStreamConfig(cfg), "ttl"); s == nil || err != nil {
		return nil, err
	}
	return p.JetStream.KeyValue(ctx, cfg.Bucket)
}

func (p *planJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return p.CreateOrUpdateKeyValue(ctx, cfg)
}

func (p *planJS) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return p.CreateOrUpdateKeyValue(ctx, cfg)
}

func (p *planJS) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if s, err := p.stream(ctx, "object store", cfg.Bucket, jetstream.StreamConfig{
		Name: "OBJ_" + cfg.Bucket, Storage: cfg.Storage, Replicas: cfg.Replicas, MaxAge: cfg.TTL,
	}, "ttl"); s == nil || err != nil {
		return nil, err
	}
	return p.JetStream.ObjectStore(ctx, cfg.Bucket)
}

func (p *planJS) CreateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return p.CreateOrUpdateObjectStore(ctx, cfg)
}

func (p *planJS) UpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return p.CreateOrUpdateObjectStore(ctx, cfg)
}

// Consumers are not compared: sagad owns their settings (an operator's
// pause is kept), and updating one weakens nothing.
func (p *planJS) CreateOrUpdateConsumer(context.Context, string, jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return nil, nil
}

func (p *planJS) CreateConsumer(context.Context, string, jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return nil, nil
}

func (p *planJS) UpdateConsumer(context.Context, string, jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return nil, nil
}

// kvStreamConfig is the part of a bucket's stream configuration that the
// jetstream client derives from cfg and sagad relies on.
func kvStreamConfig(cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                   "KV_" + cfg.Bucket,
		Storage:                cfg.Storage,
		Replicas:               cfg.Replicas,
		MaxAge:                 cfg.TTL,
		MaxMsgsPerSubject:      int64(max(cfg.History, 1)),
		SubjectDeleteMarkerTTL: cfg.LimitMarkerTTL,
	}
}

// compareStream lists the settings of found that differ from asked. Only
// what asked sets is compared for the bucket settings (history, markers),
// and the duplicates window only when asked sets one; ttlName is what the
// max age is called for this kind ("ttl" for buckets).
func compareStream(kind, name string, found, asked jetstream.StreamConfig, retention time.Duration, ttlName string) []Change {
	var out []Change
	add := func(setting, f, a, flag string, upgrade bool) {
		out = append(out, Change{Kind: kind, Name: name, Setting: setting, Found: f, Asked: a, Flag: flag, Upgrade: upgrade})
	}
	if fr, ar := max(found.Replicas, 1), max(asked.Replicas, 1); fr != ar {
		add("replicas", fmt.Sprint(fr), fmt.Sprint(ar), fmt.Sprintf("--replicas %d", fr), false)
	}
	if found.Storage != asked.Storage {
		add("storage", found.Storage.String(), asked.Storage.String(), "", false)
	}
	if found.Retention != asked.Retention {
		add("retention", found.Retention.String(), asked.Retention.String(), "", false)
	}
	if !subset(asked.Subjects, found.Subjects) {
		// Adding subjects is how a newer sagad grows a stream. Subjects
		// found and not asked for are kept (see keepSubjects): an older
		// sagad started beside a newer one must not take them away.
		add("subjects", fmt.Sprint(found.Subjects), fmt.Sprint(unionSubjects(found.Subjects, asked.Subjects)), "", true)
	}
	if found.MaxAge != asked.MaxAge {
		flag := ""
		if asked.MaxAge == retention {
			flag = "--retention " + retentionFlag(found.MaxAge)
		}
		add(ttlName, durationText(found.MaxAge), durationText(asked.MaxAge), flag, false)
	}
	if asked.Duplicates > 0 && found.Duplicates != asked.Duplicates {
		add("duplicates window", found.Duplicates.String(), asked.Duplicates.String(), "", false)
	}
	if asked.MaxMsgsPerSubject > 0 && found.MaxMsgsPerSubject != asked.MaxMsgsPerSubject {
		add("history", fmt.Sprint(found.MaxMsgsPerSubject), fmt.Sprint(asked.MaxMsgsPerSubject), "", false)
	}
	if found.SubjectDeleteMarkerTTL != asked.SubjectDeleteMarkerTTL {
		// Markers where there were none: what retention by message TTL
		// needs, and nothing is lost.
		add("marker ttl", durationText(found.SubjectDeleteMarkerTTL), durationText(asked.SubjectDeleteMarkerTTL), "",
			found.SubjectDeleteMarkerTTL == 0 && asked.SubjectDeleteMarkerTTL > 0)
	}
	return out
}

func durationText(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

// retentionFlag is the --retention value that gives a max age of d: a
// negative one keeps forever.
func retentionFlag(d time.Duration) string {
	if d == 0 {
		return "-1s"
	}
	return d.String()
}

// unionSubjects is found followed by the subjects of asked it lacks.
func unionSubjects(found, asked []string) []string {
	out := append([]string(nil), found...)
	for _, s := range asked {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// keepSubjects is a JetStream whose stream updates keep the subjects the
// stream has beyond those asked for: the streams sagad creates only ever
// gain subjects (see compareStream).
type keepSubjects struct {
	jetstream.JetStream
}

func (k keepSubjects) withKept(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	s, err := k.JetStream.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return cfg, nil
	}
	if err != nil {
		return cfg, err
	}
	cfg.Subjects = unionSubjects(s.CachedInfo().Config.Subjects, cfg.Subjects)
	return cfg, nil
}

func (k keepSubjects) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg, err := k.withKept(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return k.JetStream.CreateOrUpdateStream(ctx, cfg)
}

func (k keepSubjects) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg, err := k.withKept(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return k.JetStream.UpdateStream(ctx, cfg)
}

// subset: every element of a is in b.
func subset(a, b []string) bool {
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}
