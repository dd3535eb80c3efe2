package artifactsvc

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"time"
)

// DefaultGrantTTL is how long a grant outlives its call when nobody revokes
// it: the worker of accepted work fetches after answering "accepted".
const DefaultGrantTTL = time.Hour

// Grants is the set of live grants: which call token may read which
// artifacts. Safe for concurrent use.
type Grants struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	grants map[string]*grant // by the token's SHA-256, hex
	swept  time.Time
}

type grant struct {
	capsuleID string
	refs      []string
	expires   time.Time
}

// NewGrants returns an empty set whose grants expire ttl after they are
// made (DefaultGrantTTL when ttl <= 0); now is the clock (time.Now when nil).
func NewGrants(ttl time.Duration, now func() time.Time) *Grants {
	if ttl <= 0 {
		ttl = DefaultGrantTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Grants{ttl: ttl, now: now, grants: make(map[string]*grant)}
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Grant lets the holder of token read refs of capsuleID until revoke is
// called or the grant expires.
func (g *Grants) Grant(token, capsuleID string, refs []string) (revoke func()) {
	h := tokenHash(token)
	now := g.now()
	g.mu.Lock()
	if now.Sub(g.swept) >= time.Minute {
		// Expired grants (of accepted work nobody revoked) go at most once
		// a minute, so a grant costs O(1) however many are held.
		g.swept = now
		for k, v := range g.grants {
			if !now.Before(v.expires) {
				delete(g.grants, k)
			}
		}
	}
	g.grants[h] = &grant{capsuleID: capsuleID, refs: slices.Clone(refs), expires: now.Add(g.ttl)}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.grants, h)
		g.mu.Unlock()
	}
}

// check says whether token may read ref now, and why not; known says the
// token is a live grant of this set (a refusal of an unknown token may be
// another sagad's to answer).
func (g *Grants) check(token, ref string) (why string, ok, known bool) {
	h := tokenHash(token)
	g.mu.Lock()
	defer g.mu.Unlock()
	// Looked up by the guess's SHA-256: how long the lookup takes says
	// nothing about how much of the token a guess matched.
	found := g.grants[h]
	if found == nil || !g.now().Before(found.expires) {
		return "the token is no live call's (a call's token is good while that call runs)", false, false
	}
	if !slices.Contains(found.refs, ref) {
		return "the call does not name " + ref + " (it may fetch only its prior, context or reviewed artifacts)", false, true
	}
	return "", true, true
}

// Len is the number of grants held (expired ones included until swept).
func (g *Grants) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.grants)
}
