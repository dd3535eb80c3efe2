package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/jspub"
)

// Resolver answers REALITY_ANCHOR's question "does this ref exist?":
//
//	file:<relative path>   a file or directory under the workspace root; never
//	                       outside it (no "..", no absolute paths, no symlink escape)
//	kv:<bucket>/<key>      a key in a JetStream KV bucket the configuration
//	                       lists (Topology.KVBuckets); a ref to any other
//	                       bucket does not resolve, and is not looked up: a
//	                       capsule must not learn which keys exist in
//	                       buckets it was not given (sagad's own included)
//	artifact:<name>        an object in the SAGA_ARTIFACTS object store
//	artifact:<id>/final    the final artifact of capsule <id> (the one its
//	                       reviewer approved last, once it completed)
type Resolver struct {
	checkpoints *Checkpoints
	workspace   string
	js          jetstream.JetStream
	artifacts   *Artifacts
	// allowed lists the buckets kv: refs may name.
	allowed map[string]bool

	mu      sync.Mutex
	buckets map[string]*jspub.KVReader // bound once: binding is a round trip

	// root is the workspace's resolution, made at the first file: ref that
	// found it: resolving it again at every ref was most of a ref's cost.
	// A root retargeted later cannot widen what resolves: a ref is still
	// resolved whole, and must land under the root as first resolved.
	root atomic.Pointer[string]
}

// bucket returns the reader of a kv: ref's bucket, bound at its first ref.
func (r *Resolver) bucket(ctx context.Context, name string) (*jspub.KVReader, error) {
	r.mu.Lock()
	kr, ok := r.buckets[name]
	r.mu.Unlock()
	if ok {
		return kr, nil
	}
	kv, err := r.js.KeyValue(ctx, name)
	if err != nil {
		return nil, err
	}
	kr = jspub.NewKVReader(jspub.Conn(r.js), kv, nil, directGets(ctx, kv))
	r.mu.Lock()
	if r.buckets == nil {
		r.buckets = make(map[string]*jspub.KVReader)
	}
	if len(r.buckets) < 256 {
		r.buckets[name] = kr
	}
	r.mu.Unlock()
	return kr, nil
}

// directGets reports whether kv's stream answers direct gets of its own
// keys: it allows them and mirrors no other bucket (a mirror's keys are
// its origin's). A bucket kv: refs name is the operator's, made by any
// client; one that cannot say is read through the KV client.
func directGets(ctx context.Context, kv jetstream.KeyValue) bool {
	rctx, cancel := jspub.ReadCtx(ctx, nil)
	defer cancel()
	st, err := kv.Status(rctx)
	if err != nil {
		return false
	}
	s, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return false
	}
	cfg := s.StreamInfo().Config
	return cfg.AllowDirect && cfg.Mirror == nil
}

// Exists reports whether ref resolves; an error is a failure to find out.
func (r *Resolver) Exists(ctx context.Context, ref string) (bool, error) {
	scheme, rest, ok := strings.Cut(ref, ":")
	if !ok || rest == "" {
		return false, nil
	}
	switch scheme {
	case "file":
		return r.fileExists(rest), nil
	case "kv":
		bucket, key, ok := strings.Cut(rest, "/")
		if !ok || bucket == "" || key == "" || !r.allowed[bucket] {
			return false, nil
		}
		kr, err := r.bucket(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrInvalidBucketName) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("kv bucket %s: %w", bucket, err)
		}
		_, _, err = kr.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return false, nil
		}
		return err == nil, err
	case "artifact":
		if strings.HasSuffix(rest, FinalSuffix) && r.checkpoints != nil {
			final, ok, err := r.checkpoints.ResolveFinal(ctx, ref)
			if err != nil || !ok {
				return false, err
			}
			rest = strings.TrimPrefix(final, "artifact:")
		}
		return r.artifacts.exists(ctx, "artifact:"+rest)
	}
	return false, nil
}

// fileExists resolves rel under the workspace, refusing anything that would
// leave it, including through a symlink. It resolves from the workspace's
// root as first resolved (a root moved while sagad runs is seen at its next
// start).
func (r *Resolver) fileExists(rel string) bool {
	if rel == "" || strings.ContainsRune(rel, 0) || strings.Contains(rel, `\`) || path.IsAbs(rel) || filepath.IsAbs(rel) {
		return false
	}
	clean := path.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return false
	}
	root, ok := r.workspaceRoot()
	if !ok {
		return false
	}
	if exists, plain := plainExists(root, clean); plain {
		return exists
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(clean)))
	if err != nil {
		return false
	}
	// EvalSymlinks found every component of real: it exists.
	return real == root || strings.HasPrefix(real, root+string(filepath.Separator))
}

// plainExists answers for clean (relative, no "..") under root (resolved)
// when none of clean's components is a symlink: each is looked at in turn,
// so the ref cannot leave root, and root's own components are not walked
// again at every ref (EvalSymlinks did: most of a ref's cost). plain false
// (a symlink met) leaves the answer to EvalSymlinks.
func plainExists(root, clean string) (exists, plain bool) {
	if clean == "." {
		return true, true
	}
	cur := root
	for comp := range strings.SplitSeq(clean, "/") {
		cur += string(filepath.Separator) + comp
		fi, err := os.Lstat(cur)
		if err != nil {
			return false, true
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return false, false
		}
	}
	return true, true
}

// workspaceRoot returns the workspace root with its symlinks resolved; a
// failure is not kept (the root may not exist yet).
func (r *Resolver) workspaceRoot() (string, bool) {
	if p := r.root.Load(); p != nil {
		return *p, true
	}
	root, err := filepath.EvalSymlinks(r.workspace)
	if err != nil {
		return "", false
	}
	r.root.Store(&root)
	return root, true
}

// ResolveFinal turns artifact:<capsule_id>/final into the ref of that
// capsule's final artifact; other refs come back as they are.
func (r *Resolver) ResolveFinal(ctx context.Context, ref string) (string, bool, error) {
	if r.checkpoints == nil {
		return ref, true, nil
	}
	return r.checkpoints.ResolveFinal(ctx, ref)
}
