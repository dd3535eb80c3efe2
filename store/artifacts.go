package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/plainjson"
	"github.com/sagad/sagad/internal/seqid"
)

// ArtifactRef is the artifact: URI of the artifact of (capsuleID, cycle).
func ArtifactRef(capsuleID string, cycle int) string {
	return "artifact:" + capsuleID + "/" + strconv.Itoa(cycle)
}

// Artifact records are small; the object store's default 128 KiB chunk
// buffer is allocated whole for every put, so chunks are sized to fit.
const (
	minChunk = 4 << 10
	maxChunk = 128 << 10
)

// recentArtifacts and recentBytes bound the in-process copies kept for
// REVIEW, in number and in content bytes: an executor's output may be MiBs
// (a command's is capped at 4 MiB by default), and a thousand of those
// would be gigabytes.
const (
	recentArtifacts = 1024
	recentBytes     = 64 << 20
)

// artifactReadTimeout bounds one object store read. The nats.go client sets
// the read deadline of the pipe it reads chunks through to the context's
// deadline, and that deadline's timer keeps the pipe alive until it fires,
// read or not: under the phase's own deadline (10 minutes by default) every
// read held about a kilobyte for that long, which grew with the read rate.
// An artifact is at most a few MiB (an executor's output is capped), read
// in well under this.
const artifactReadTimeout = 30 * time.Second

// Artifacts keeps artifact records, one per (capsule, cycle): a record
// whose bytes fit one message ([Artifacts.inline]) as one put into the
// SAGA_ARTIFACT_RECORDS bucket, a larger one as an object of the
// SAGA_ARTIFACTS object store (its chunks, then its metadata). Either form
// is keyed by the ref's name, "<capsule_id>/<cycle>"; a redelivered put
// writes the same bytes under the same key or name, so it is idempotent.
// Reads ask the bucket first and the object store on a miss, so records
// written by an older sagad (every one an object) are still read. It keeps
// the artifacts it wrote last in memory: REVIEW usually runs in the process
// that ran EXECUTION.
type Artifacts struct {
	os jetstream.ObjectStore
	// records is SAGA_ARTIFACT_RECORDS; nil when the topology predates it
	// (a store Opened over an older sagad's): every record is an object.
	records jetstream.KeyValue
	// recordReader reads records (a direct get with its deadline).
	recordReader *jspub.KVReader
	js           jetstream.JetStream
	w            *jspub.Writes // bounds and observes every object store write
	recordW      *jspub.Writes // the same for the records bucket
	// ids makes the objects' ids (nuid.Next shares one lock process-wide).
	ids *seqid.Gen

	mu     sync.Mutex
	recent map[string]capsule.Artifact
	// order holds recent's refs in the order they were first put: the
	// oldest is evicted first. REVIEW reads an artifact shortly after
	// EXECUTION put it, so the newest are the ones worth keeping; a random
	// eviction dropped a live one now and then, and each miss cost a read.
	order []string
	bytes int // content bytes in recent
}

func newArtifactStore(os jetstream.ObjectStore, records jetstream.KeyValue, js jetstream.JetStream) *Artifacts {
	s := &Artifacts{os: os, records: records, js: js, ids: seqid.New(), recent: make(map[string]capsule.Artifact, recentArtifacts)}
	s.setWrites(nil)
	return s
}

// setWrites makes w the policy of the object store's writes and its copy
// on the records bucket that of the records' writes and reads.
func (s *Artifacts) setWrites(w *jspub.Writes) {
	s.w, s.recordW = w.On(ArtifactsBucket), w.On(ArtifactRecordsBucket)
	if s.records != nil {
		s.recordReader = jspub.NewKVReader(jspub.Conn(s.js), s.records, s.recordW, true)
	}
}

// maxInlineRecord is the largest record written as one put into the
// records bucket: the object store's largest chunk, so that exactly the
// records that were one chunk plus metadata (two requests) become one
// request, and larger ones keep the object store's chunking. It is well
// under nats-server's default max_payload (1 MiB), which also bounds the
// message; a server configured below it lowers the bound (inline).
const maxInlineRecord = maxChunk

// recordHeadroom is what a record's put, or an object's chunk, carries
// beside its bytes within max_payload: the headers of a message, well
// under a KiB.
const recordHeadroom = 1 << 10

// payloadRoom is the most bytes one message of the server's max_payload
// carries with headroom to spare.
func (s *Artifacts) payloadRoom() int {
	if s.js == nil {
		return math.MaxInt
	}
	if nc := s.js.Conn(); nc != nil && nc.MaxPayload() > 0 {
		return int(nc.MaxPayload()) - recordHeadroom
	}
	return math.MaxInt
}

// inline says a record of n bytes named name is written into the records
// bucket: the bucket exists, the name is a key and the message fits the
// server's max_payload with room to spare.
func (s *Artifacts) inline(name string, n int) bool {
	return s.records != nil && n <= min(maxInlineRecord, s.payloadRoom()) && jspub.ValidKey(name)
}

// Put writes the artifact's record: one put into the records bucket when
// it fits one message (see [Artifacts.inline]), else an object store
// object, its chunks then its metadata, in the object store's own format so
// that any object store client reads it. It writes the object itself
// because the client's Put first reads the object's previous metadata (one
// more request per artifact) to purge its chunks afterwards; an artifact is
// written once per cycle, and chunks a crashed put left without metadata
// expire with the bucket's TTL.
func (s *Artifacts) Put(ctx context.Context, a capsule.Artifact) (string, error) {
	a.Ref = ArtifactRef(a.CapsuleID, a.Cycle)
	buf := artifactBufs.Get().(*[]byte)
	b, err := s.write(ctx, &a, (*buf)[:0])
	if cap(b) <= maxPooledArtifact {
		*buf = b[:0]
		artifactBufs.Put(buf)
	}
	if err != nil {
		return "", err
	}
	s.remember(a)
	return a.Ref, nil
}

// artifactBufs recycles the bytes Put writes: an artifact's, then its
// metadata's in the same buffer. Each chunk and the metadata are copied
// into the connection's buffer before their publish returns, as a
// checkpoint's bytes are (encodeBufs), so the buffer is free when Put is.
var artifactBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// maxPooledArtifact: a buffer grown for a large artifact is dropped rather
// than kept (an executor's output may be MiBs).
const maxPooledArtifact = 64 << 10

// write publishes a's record, encoded into b, and returns the buffer it
// last wrote into, for Put to recycle.
func (s *Artifacts) write(ctx context.Context, a *capsule.Artifact, b []byte) ([]byte, error) {
	b, err := appendArtifact(slices.Grow(b, artifactLen(a)), a)
	if err != nil {
		return b, err
	}
	name := strings.TrimPrefix(a.Ref, "artifact:")
	if s.inline(name, len(b)) {
		return b, s.putRecord(ctx, name, b)
	}
	return s.writeObject(ctx, name, b)
}

// putRecord writes b as the record name of the records bucket: a plain
// put, so a redelivered one (the same bytes) replaces it, history 1.
func (s *Artifacts) putRecord(ctx context.Context, name string, b []byte) error {
	// Pooled, as the object's messages: nats.go encodes a message before
	// its request returns and keeps no reference to it.
	p := jspub.GetMsg(recordPrefix+name, b)
	_, err := s.recordW.Publish(ctx, s.js.Conn(), p.Msg())
	p.Release()
	if err != nil {
		return fmt.Errorf("put artifact %s: %w", name, err)
	}
	return nil
}

// recordPrefix is the subject of the records bucket's keys, up to the key.
const recordPrefix = "$KV." + ArtifactRecordsBucket + "."

// writeObject publishes b as the object name: its chunks, then its
// metadata, encoded into b's buffer once the chunks are out.
func (s *Artifacts) writeObject(ctx context.Context, name string, b []byte) ([]byte, error) {
	// A server with a max_payload under maxChunk takes smaller chunks.
	chunk := max(min(max(len(b), minChunk), maxChunk, s.payloadRoom()), 1)
	id := s.ids.Next()
	chunks, err := s.putChunks(ctx, name, id, b, chunk)
	if err != nil {
		return b, err
	}
	sum := sha256.Sum256(b)
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(chunk)}},
		Bucket:     ArtifactsBucket,
		NUID:       id,
		Size:       uint64(len(b)),
		ModTime:    time.Now().UTC(),
		Chunks:     uint32(chunks),
		Digest:     "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]),
	}
	// The chunks are published and summed: their bytes are free.
	mb, err := appendObjectInfo(slices.Grow(b[:0], objectInfoLen(&info)), &info)
	if err != nil {
		return mb, err
	}
	subject := make([]byte, 0, len(metaPrefix)+base64.URLEncoding.EncodedLen(len(name)))
	subject = base64.URLEncoding.AppendEncode(append(subject, metaPrefix...), []byte(name))
	// Pooled messages, as the checkpoint writes': nats.go encodes a
	// message before its request returns and keeps no reference to it.
	p := jspub.GetMsg(string(subject), mb)
	p.Headers().Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	_, err = s.w.Publish(ctx, s.js.Conn(), p.Msg())
	p.Release()
	if err != nil {
		return mb, fmt.Errorf("put artifact %s: %w", name, err)
	}
	return mb, nil
}

// The object store's subjects for SAGA_ARTIFACTS: chunks under the object's
// id, metadata under the base64 of its name.
const (
	chunkPrefix = "$O." + ArtifactsBucket + ".C."
	metaPrefix  = "$O." + ArtifactsBucket + ".M."
)

// putChunks publishes b in chunks of chunk bytes (one at least, empty for
// an empty b), in order: the object store reads chunks in stream order.
func (s *Artifacts) putChunks(ctx context.Context, name, id string, b []byte, chunk int) (int, error) {
	subject := chunkPrefix + id
	n := 0
	for off := 0; off < len(b) || n == 0; off += chunk {
		p := jspub.GetMsg(subject, b[off:min(off+chunk, len(b))])
		_, err := s.w.Publish(ctx, s.js.Conn(), p.Msg())
		p.Release()
		if err != nil {
			return 0, fmt.Errorf("put artifact %s: %w", name, err)
		}
		n++
	}
	return n, nil
}

// appendObjectInfo appends json.Marshal(info) for the metadata Put writes.
// Every artifact put encoded it through reflection; this writes the same
// bytes directly (TestObjectInfoAsMarshal), and hands any value it was not
// written for — one with members Put does not set, or a string that JSON
// would escape — to json.Marshal itself.
func appendObjectInfo(b []byte, info *jetstream.ObjectInfo) ([]byte, error) {
	if !plainObjectInfo(info) {
		return marshalAppend(b, *info) // a copy: info itself stays on the caller's stack
	}
	n0 := len(b)
	b = append(b, `{"name":"`...)
	b = append(b, info.Name...)
	b = append(b, `","options":{"max_chunk_size":`...)
	b = strconv.AppendUint(b, uint64(info.Opts.ChunkSize), 10)
	b = append(b, `},"bucket":"`...)
	b = append(b, info.Bucket...)
	b = append(b, `","nuid":"`...)
	b = append(b, info.NUID...)
	b = append(b, `","size":`...)
	b = strconv.AppendUint(b, info.Size, 10)
	b = append(b, `,"mtime":`...)
	b, ok := plainjson.AppendTime(b, info.ModTime)
	if !ok {
		return marshalAppend(b[:n0], *info)
	}
	b = append(b, `,"chunks":`...)
	b = strconv.AppendUint(b, uint64(info.Chunks), 10)
	b = append(b, `,"digest":"`...)
	b = append(b, info.Digest...)
	return append(b, `"}`...), nil
}

// marshalAppend appends json.Marshal(v).
func marshalAppend(b []byte, v any) ([]byte, error) {
	mb, err := json.Marshal(v)
	return append(b, mb...), err
}

// appendArtifact appends json.Marshal(a), the bytes Put stores. Every put
// encoded the artifact through reflection; this writes the members
// directly and compacts the content as encoding/json does
// (TestArtifactJSONAsMarshal, FuzzArtifactJSON), and hands any value it
// was not written for — a string JSON would escape, dollars JSON would
// write with an exponent (or refuse), content with a byte encoding/json
// escapes for HTML, or content that is not JSON — to json.Marshal itself,
// whose bytes or error are then Put's.
func appendArtifact(b []byte, a *capsule.Artifact) ([]byte, error) {
	if !plainArtifact(a) {
		return marshalAppend(b, *a) // a copy: a itself stays on the caller's stack
	}
	n0 := len(b)
	b = appendMember(append(b, '{'), "schema_version", a.SchemaVersion)
	b = appendMember(append(b, ','), "ref", a.Ref)
	b = appendMember(append(b, ','), "capsule_id", a.CapsuleID)
	b = appendMember(append(b, ','), "producer_agent_id", a.ProducerAgentID)
	b = strconv.AppendInt(append(b, `,"cycle":`...), int64(a.Cycle), 10)
	b = appendMember(append(b, ','), "media_type", a.MediaType)
	b = appendMember(append(b, ','), "sha256", a.SHA256)
	b = strconv.AppendInt(append(b, `,"size":`...), a.Size, 10)
	b = strconv.AppendInt(append(b, `,"usage":{"tokens":`...), a.Usage.Tokens, 10)
	b = strconv.AppendFloat(append(b, `,"dollars":`...), a.Usage.Dollars, 'f', -1, 64)
	b, ok := plainjson.AppendTime(append(b, `},"created_at":`...), a.CreatedAt)
	if !ok {
		return marshalAppend(b[:n0], *a)
	}
	if len(a.Content) > 0 {
		buf := bytes.NewBuffer(append(b, `,"content":`...))
		if json.Compact(buf, a.Content) != nil {
			return marshalAppend(b[:n0], *a)
		}
		b = buf.Bytes()
	}
	return append(b, '}'), nil
}

// appendMember appends "name":"s" for a name and an s JSON writes as they are.
func appendMember(b []byte, name, s string) []byte {
	b = append(append(append(b, '"'), name...), `":"`...)
	return append(append(b, s...), '"')
}

// plainArtifact says appendArtifact writes a as json.Marshal does: its
// strings plain, its dollars finite and written without an exponent
// (encoding/json uses one below 1e-6 and from 1e21), its content without
// the bytes encoding/json escapes for HTML (<, >, &, and U+2028 and
// U+2029, which start with 0xE2); whether the content is JSON is checked
// as it is compacted.
func plainArtifact(a *capsule.Artifact) bool {
	if d := math.Abs(a.Usage.Dollars); d != 0 && !(d >= 1e-6 && d < 1e21) {
		return false // NaN fails both comparisons
	}
	for _, c := range a.Content {
		if c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return false
		}
	}
	return plainjson.Plain(a.SchemaVersion) && plainjson.Plain(a.Ref) && plainjson.Plain(a.CapsuleID) &&
		plainjson.Plain(a.ProducerAgentID) && plainjson.Plain(a.MediaType) && plainjson.Plain(a.SHA256)
}

// artifactLen is room for appendArtifact's bytes: the strings, the content
// and what surrounds them (members' names, numbers, the time).
func artifactLen(a *capsule.Artifact) int {
	return 320 + len(a.SchemaVersion) + len(a.Ref) + len(a.CapsuleID) + len(a.ProducerAgentID) +
		len(a.MediaType) + len(a.SHA256) + len(a.Content)
}

// objectInfoLen is room for appendObjectInfo's bytes: the strings and
// what surrounds them (members' names, numbers, the time).
func objectInfoLen(info *jetstream.ObjectInfo) int {
	return 192 + len(info.Name) + len(info.Bucket) + len(info.NUID) + len(info.Digest)
}

// plainObjectInfo says appendObjectInfo writes info as json.Marshal does:
// only the members Put sets, each present (a chunk size and digest are),
// strings JSON writes as they are (the time is checked as it is written).
func plainObjectInfo(info *jetstream.ObjectInfo) bool {
	o := info.Opts
	if o == nil || o.Link != nil || o.ChunkSize == 0 || info.Description != "" || info.Headers != nil ||
		info.Metadata != nil || info.Digest == "" || info.Deleted {
		return false
	}
	return plainjson.Plain(info.Name) && plainjson.Plain(info.Bucket) && plainjson.Plain(info.NUID) && plainjson.Plain(info.Digest)
}

func (s *Artifacts) remember(a capsule.Artifact) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.recent[a.Ref]; ok {
		s.bytes -= len(old.Content) // a redelivered put keeps its place
	} else {
		s.order = append(s.order, a.Ref)
	}
	s.recent[a.Ref] = a
	s.bytes += len(a.Content)
	// The newest always stays, however large.
	for len(s.order) > 1 && (len(s.recent) > recentArtifacts || s.bytes > recentBytes) {
		oldest := s.order[0]
		s.order[0] = ""
		s.order = s.order[1:]
		s.bytes -= len(s.recent[oldest].Content)
		delete(s.recent, oldest)
	}
}

// Get returns the artifact ref names ("artifact:<capsule_id>/<cycle>"):
// this process's copy when it wrote it lately, else the stored record. A
// record that is not, or no longer, stored is an error wrapping
// [capsule.ErrArtifactGone] and jetstream.ErrObjectNotFound.
func (s *Artifacts) Get(ctx context.Context, ref string) (capsule.Artifact, error) {
	s.mu.Lock()
	a, ok := s.recent[ref]
	s.mu.Unlock()
	if ok {
		return a, nil
	}
	return s.read(ctx, ref)
}

// read reads ref's stored record. Its own function: the artifact decoded
// into goes to the heap, which the in-process copy Get returns need not.
func (s *Artifacts) read(ctx context.Context, ref string) (capsule.Artifact, error) {
	b, bucket, err := s.recordBytes(ctx, ref)
	if err != nil {
		return capsule.Artifact{}, err
	}
	a, err := decodeArtifact(ref, b)
	if err != nil {
		// Only sagad writes records: one that does not decode reads the
		// same every time, so the phase halts state_corrupt rather than
		// trying again until the capsule's deadline.
		return capsule.Artifact{}, corrupt.New(bucket, strings.TrimPrefix(ref, "artifact:"), 0, err)
	}
	return a, nil
}

// Bytes returns ref's stored record as it was written, whichever its form:
// the records bucket's entry, else (a large record, or one an older sagad
// wrote) the object's bytes. The bucket is asked first: most records are
// there, and a miss costs one direct get before the object store's reads.
// A record in neither is an error wrapping [capsule.ErrArtifactGone] and
// jetstream.ErrObjectNotFound.
func (s *Artifacts) Bytes(ctx context.Context, ref string) ([]byte, error) {
	b, _, err := s.recordBytes(ctx, ref)
	return b, err
}

// recordBytes is Bytes, and the bucket (or object store) the record was read from.
func (s *Artifacts) recordBytes(ctx context.Context, ref string) ([]byte, string, error) {
	name := strings.TrimPrefix(ref, "artifact:")
	if b, ok, err := s.fromBucket(ctx, name); err != nil {
		return nil, "", fmt.Errorf("get artifact %s: %w", ref, err)
	} else if ok {
		return b, ArtifactRecordsBucket, nil
	}
	ctx, cancel := context.WithTimeout(ctx, artifactReadTimeout)
	defer cancel()
	b, err := s.os.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		if b, ok, lerr := s.recordFromLeader(ctx, name); lerr != nil {
			return nil, "", fmt.Errorf("get artifact %s: %w", ref, lerr)
		} else if ok {
			return b, ArtifactRecordsBucket, nil
		}
		return nil, "", fmt.Errorf("get artifact %s: %w: %w", ref, capsule.ErrArtifactGone, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("get artifact %s: %w", ref, err)
	}
	return b, ArtifactsBucket, nil
}

// errArtifactNamesOther: a stored record that names another artifact than
// the ref it was read under. Only sagad writes records, under their own
// ref's name; this holds a record to its key all the same (no bytes read
// from NATS are trusted).
var errArtifactNamesOther = errors.New("the record names another artifact")

// decodeArtifact decodes the stored record b of ref (either form: the
// bytes are the same) and checks it is ref's.
func decodeArtifact(ref string, b []byte) (capsule.Artifact, error) {
	var a capsule.Artifact
	if err := json.Unmarshal(b, &a); err != nil {
		return capsule.Artifact{}, fmt.Errorf("decode artifact %s: %w", ref, err)
	}
	if a.Ref != ref {
		return capsule.Artifact{}, fmt.Errorf("decode artifact %s: %w (%q)", ref, errArtifactNamesOther, a.Ref)
	}
	return a, nil
}

// Lookup returns the artifact of capsuleID's cycle; found is false when it
// is not, or no longer, stored.
func (s *Artifacts) Lookup(ctx context.Context, capsuleID string, cycle int) (capsule.Artifact, bool, error) {
	a, err := s.Get(ctx, ArtifactRef(capsuleID, cycle))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return a, false, nil
	}
	if err != nil {
		return a, false, err
	}
	return a, true, nil
}

// exists says ref's record is stored, in either form, without reading an
// object's chunks.
func (s *Artifacts) exists(ctx context.Context, ref string) (bool, error) {
	name := strings.TrimPrefix(ref, "artifact:")
	if _, ok, err := s.fromBucket(ctx, name); err != nil || ok {
		return ok, err
	}
	_, err := s.os.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		_, ok, err := s.recordFromLeader(ctx, name)
		return ok, err
	}
	return err == nil, err
}

// fromBucket reads name's record from the records bucket with a direct get
// (any replica may answer). ok false: none there, or no bucket, or name is
// no key (such a record is an object).
func (s *Artifacts) fromBucket(ctx context.Context, name string) (b []byte, ok bool, err error) {
	if s.recordReader == nil || !jspub.ValidKey(name) {
		return nil, false, nil
	}
	b, _, err = s.recordReader.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	return b, err == nil, err
}

// recordFromLeader reads name's record from the records stream's leader:
// a direct get may be answered by a replica that has not yet stored a put
// another sagad just made (R3), and a record missing in both forms halts
// REVIEW (the artifact is gone) or has EXECUTION call its executor again
// after a crash. Only a miss pays this read. ok false: the leader has no
// record either.
func (s *Artifacts) recordFromLeader(ctx context.Context, name string) (b []byte, ok bool, err error) {
	if s.recordReader == nil || s.js == nil || !jspub.ValidKey(name) {
		return nil, false, nil
	}
	b, _, err = lastFromLeader(ctx, s.js, s.recordW, ArtifactRecordsBucket, name)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("record %s: %w", name, err)
	}
	return b, len(b) > 0, nil
}
