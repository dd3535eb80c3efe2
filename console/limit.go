package console

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// MinTokenLen is the shortest token the console accepts, in bytes: with
// wrong guesses rate limited, 32 random bytes (or 32 characters of a
// password generator) leave nothing to guess in any useful time.
const MinTokenLen = 32

// failureBurst and failureEvery shape the allowance of failed
// authentications per client address: failureBurst at once, then one per
// failureEvery. A person mistyping is never held up; a guesser gets about
// one try a second.
const (
	failureBurst = 10
	failureEvery = time.Second
	// maxClients bounds the addresses remembered; past it, those whose
	// allowance has refilled are forgotten first.
	maxClients = 4096
)

// failures is a token bucket of failed authentications per client address:
// each failure takes a token, and a client with none left is answered 429
// before its credentials are even looked at, so a wrong guess costs the
// guesser time. Successes cost nothing. Behind a proxy every client shares
// the proxy's address: a guesser there slows its neighbours, never lets it
// guess faster.
type failures struct {
	mu      sync.Mutex
	now     func() time.Time
	clients map[string]*allowance
}

type allowance struct {
	tokens float64
	at     time.Time
}

func newFailures(now func() time.Time) *failures {
	return &failures{now: now, clients: make(map[string]*allowance)}
}

// clientAddr is the address a request came from, without its port.
func clientAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// refill brings a's tokens up to now; the caller holds f.mu.
func (f *failures) refill(a *allowance, now time.Time) {
	if d := now.Sub(a.at); d > 0 {
		a.tokens = math.Min(failureBurst, a.tokens+d.Seconds()/failureEvery.Seconds())
		a.at = now
	}
}

// blocked reports whether addr has no failures left, and how long until it has one.
func (f *failures) blocked(addr string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.clients[addr]
	if !ok {
		return 0, false
	}
	f.refill(a, f.now())
	if a.tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - a.tokens) * float64(failureEvery)), true
}

// fail takes one failure from addr's allowance.
func (f *failures) fail(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	a, ok := f.clients[addr]
	if !ok {
		if len(f.clients) >= maxClients {
			f.prune(now)
		}
		a = &allowance{tokens: failureBurst, at: now}
		f.clients[addr] = a
	}
	f.refill(a, now)
	a.tokens = math.Max(0, a.tokens-1)
}

// prune forgets the clients whose allowance is full again, or, when all
// are still short, any one of them (the map must stay bounded); the caller
// holds f.mu.
func (f *failures) prune(now time.Time) {
	for k, a := range f.clients {
		f.refill(a, now)
		if a.tokens >= failureBurst {
			delete(f.clients, k)
		}
	}
	for k := range f.clients {
		if len(f.clients) < maxClients {
			break
		}
		delete(f.clients, k)
	}
}

// tooMany answers a client that has used up its failures.
func tooMany(w http.ResponseWriter, wait time.Duration) {
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, http.StatusTooManyRequests, "too many failed authentications from this address: try again in "+strconv.Itoa(secs)+"s")
}
