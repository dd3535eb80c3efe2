package executors

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
)

// stubInput is what the stub's artifact is made from.
type stubInput struct {
	title, target, key string
	cycle              int
}

// stubContentPair holds the stub's artifact to json.Marshal of the map it
// was made from: strings of every shape (JSON escapes, HTML characters,
// non-ASCII, invalid UTF-8), cycles to their limits.
var stubContentPair = differential.Pair[stubInput, string]{
	Name: "StubContent",
	Fast: func(in stubInput) (string, error) {
		b, err := stubContent(in.title, in.target, in.key, in.cycle)
		return string(b), err
	},
	Reference: func(in stubInput) (string, error) {
		b, err := json.Marshal(map[string]any{
			"summary": "stub artifact for " + in.title, "cycle": in.cycle, "target": in.target, "idempotency_key": in.key,
		})
		return string(b), err
	},
	Seeds: []stubInput{
		{"Benchmark capsule", "kv:BENCH_TARGETS/t", "x/1", 0}, {"Benchmark capsule", "kv:BENCH_TARGETS/t", "x/1", 1},
		{"Benchmark capsule", "kv:BENCH_TARGETS/t", "x/1", -1}, {"Benchmark capsule", "kv:BENCH_TARGETS/t", "x/1", math.MaxInt},
		{"Benchmark capsule", "kv:BENCH_TARGETS/t", "x/1", math.MinInt},
		{"Benchmark capsule", "kv:BENCH_TARGETS/t", "0190a1b2-c3d4/1", 1}, {"a<b>&\"c\"\\\u2028", "\xff", "é\n", -7},
	},
	Generate: func(rng *rand.Rand) stubInput {
		const alphabet = "abcXYZ019-_/.=: \"\\<>&\n\x7f\x00é\xff\u2028"
		str := func() string {
			if rng.IntN(2) == 0 {
				return "kv:BENCH_TARGETS/t 0190a1b2-c3d4/1"[:rng.IntN(35)]
			}
			b := make([]byte, rng.IntN(12))
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			return string(b)
		}
		return stubInput{str(), str(), str(), int(rng.Int64()) >> rng.IntN(64)}
	},
	Count: 20000,
	// The cycle (8 bytes), then the title, the target and the key, apart
	// by zero bytes.
	Decode: func(b []byte) (stubInput, bool) {
		if len(b) < 8 {
			return stubInput{}, false
		}
		parts := strings.SplitN(string(b[8:]), "\x00", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		return stubInput{parts[0], parts[1], parts[2], int(binary.LittleEndian.Uint64(b))}, true
	},
	Encode: func(in stubInput) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, uint64(in.cycle)), in.title+"\x00"+in.target+"\x00"+in.key...)
	},
}

// The stub's fast paths, held to what they replace by the shared harness.
func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{stubContentPair, hexPair, tokenHashPair})
}

// FuzzStubContent: the stub's artifact is json.Marshal's of its map.
func FuzzStubContent(f *testing.F) { differential.Fuzz(f, stubContentPair) }

// BenchmarkStubContent makes the stub's artifact, directly and through
// json.Marshal of a map.
func BenchmarkStubContent(b *testing.B) {
	const title, target, key = "Benchmark capsule", "kv:BENCH_TARGETS/t", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1"
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = stubContent(title, target, key, 1)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(map[string]any{"summary": "stub artifact for " + title, "cycle": 1, "target": target, "idempotency_key": key})
		}
	})
}

// randomStubMetadata is metadata of every shape the stub meets: none,
// scripts of reviews, rounds, usages and failures (valid and not), other
// members, text that is not JSON, and metadata past the cache's bound.
func randomStubMetadata(rng *rand.Rand) string {
	verdicts := []string{`"APPROVED"`, `"CHANGES_REQUESTED"`, `"REJECTED"`, `"APPROVED"`, `"CHANGES_REQUESTED"`,
		`"REJECTED"`, `"APPROVED"`, `"CHANGES_REQUESTED"`, `"REJECTED"`, `"NOPE"`, `null`, `1`}
	fails := []string{`true`, `false`, `null`, `"boom"`, `""`, ` true `, `{"a":1}`, `3`, `"é\u00e9"`}
	usages := []string{`{"tokens":3,"dollars":1.5}`, `{"tokens":7}`, `{}`, `{"dollars":0.25}`, `null`,
		`{"tokens":-1}`, `{"dollars":-0.5}`, `"x"`}
	var members []string
	if rng.IntN(2) == 0 {
		members = append(members, `"reviews":[`+verdicts[rng.IntN(len(verdicts))]+`,`+verdicts[rng.IntN(len(verdicts))]+`]`)
	}
	if rng.IntN(3) == 0 {
		members = append(members, `"rounds":[[`+verdicts[rng.IntN(len(verdicts))]+`],[]]`)
	}
	if rng.IntN(3) == 0 {
		members = append(members, `"fail":`+fails[rng.IntN(len(fails))])
	}
	if rng.IntN(3) == 0 {
		members = append(members, `"usage":`+usages[rng.IntN(len(usages))])
	}
	if rng.IntN(3) == 0 {
		members = append(members, `"review_usage":`+usages[rng.IntN(len(usages))])
	}
	other := fmt.Sprintf(`"n":%d`, rng.IntN(400)) // many distinct metadata: the cache fills and is dropped
	switch rng.IntN(12) {
	case 0:
		return ""
	case 1:
		return `{"stub":` // not JSON
	case 2:
		other = `"pad":"` + strings.Repeat("x", 1100) + `"`
	}
	return `{"stub":{` + strings.Join(members, ",") + `},` + other + `}`
}

// TestStubCacheAsParse holds the remembered scripts to ParseStubScript and
// the script's failure message, each metadata met several times, over more
// distinct metadata than the cache keeps.
func TestStubCacheAsParse(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 13))
	cache := stubCache{scripts: make(map[string]stubParsed)}
	refused, failed := 0, 0
	for range 20000 {
		c := &capsule.Capsule{}
		if m := randomStubMetadata(rng); m != "" {
			c.Metadata = json.RawMessage(m)
		}
		want, wantErr := ParseStubScript(c)
		got, failure, err := cache.parse(c)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("%s: error %v, ParseStubScript's %v", c.Metadata, err, wantErr)
		}
		if err == nil && (!reflect.DeepEqual(got, want) || failure != want.failure()) {
			t.Fatalf("%s:\n got %+v %q\nwant %+v %q", c.Metadata, got, failure, want, want.failure())
		}
		if len(cache.scripts) > stubCacheEntries {
			t.Fatalf("%d scripts kept", len(cache.scripts))
		}
		if err != nil {
			refused++
		} else if failure != "" {
			failed++
		}
	}
	if refused < 2000 || failed < 2000 || refused+failed > 16000 {
		t.Fatalf("%d refused, %d failing: the metadata are not varied enough", refused, failed)
	}
}

// TestStubCacheConcurrent: executions and reviews of capsules sharing
// metadata, at once (run with -race).
func TestStubCacheConcurrent(t *testing.T) {
	t.Parallel()
	metadata := []string{`{"stub":{"reviews":["CHANGES_REQUESTED","APPROVED"]}}`, `{"stub":{"fail":"boom"}}`, `{"x":1}`}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c := &capsule.Capsule{Metadata: json.RawMessage(metadata[(g+i)%len(metadata)])}
				_, _ = Stub{}.Execute(context.Background(), Request{Capsule: c, Cycle: 1})
				rr, err := StubReviewer{}.Review(context.Background(), ReviewRequest{Capsule: c, Cycle: 1})
				if err != nil || (g+i)%len(metadata) == 0 && rr.Verdict != capsule.ChangesRequested {
					t.Errorf("%s: %+v, %v", c.Metadata, rr, err)
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkStubScript reads a review capsule's script, remembered and by
// ParseStubScript.
func BenchmarkStubScript(b *testing.B) {
	c := &capsule.Capsule{Metadata: json.RawMessage(`{"stub":{"reviews":["CHANGES_REQUESTED","APPROVED"]}}`)}
	b.Run("cache", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _, _ = stubScripts.parse(c)
		}
	})
	b.Run("ParseStubScript", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			s, _ := ParseStubScript(c)
			_ = s.failure()
		}
	})
}
