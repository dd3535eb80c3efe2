package executors

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sagad/sagad/capsule"
)

func requireStubContentAsMarshal(t *testing.T, title, target, key string, cycle int) {
	t.Helper()
	want, wantErr := json.Marshal(map[string]any{
		"summary":         "stub artifact for " + title,
		"cycle":           cycle,
		"target":          target,
		"idempotency_key": key,
	})
	got, err := stubContent(title, target, key, cycle)
	if err != nil || wantErr != nil {
		t.Fatalf("error %v, json.Marshal's %v", err, wantErr)
	}
	if string(got) != string(want) {
		t.Fatalf("%q %q %q %d:\n got %s\nwant %s", title, target, key, cycle, got, want)
	}
}

// TestStubContentAsMarshal holds the stub's artifact to json.Marshal of
// the map it was made from: strings of every shape (JSON escapes, HTML
// characters, non-ASCII, invalid UTF-8), cycles to their limits.
func TestStubContentAsMarshal(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 12))
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
	for _, c := range []int{0, 1, -1, math.MaxInt, math.MinInt} {
		requireStubContentAsMarshal(t, "Benchmark capsule", "kv:BENCH_TARGETS/t", "x/1", c)
	}
	for range 20000 {
		requireStubContentAsMarshal(t, str(), str(), str(), int(rng.Int64())>>rng.IntN(64))
	}
}

// FuzzStubContent: the stub's artifact is json.Marshal's of its map.
func FuzzStubContent(f *testing.F) {
	f.Add("Benchmark capsule", "kv:BENCH_TARGETS/t", "0190a1b2-c3d4/1", 1)
	f.Add("a<b>&\"c\"\\\u2028", "\xff", "é\n", -7)
	f.Fuzz(func(t *testing.T, title, target, key string, cycle int) {
		requireStubContentAsMarshal(t, title, target, key, cycle)
	})
}

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
