package cas

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// MaxAttempts is how many times [Retry] runs one read-modify-write before it
// gives up. Each conflict means another writer's change to the same key
// went in during ours, so running out takes that many changes landing
// during a single one (a hot wave budget with dozens of writers, or a
// checkpoint that an operator and several deliveries fight over): the
// limit only ends pathological contention, while the growing random waits
// below (at most 8 ms each) spread ordinary contention out.
const MaxAttempts = 100

// ErrConflict is what an attempt returns (wrapped or not) when its write
// lost the compare-and-set for a reason [Conflict] cannot see, e.g. a
// store that maps the server's error to its own.
var ErrConflict = errors.New("compare-and-set conflict")

// ErrExhausted is returned (wrapped) when every attempt conflicted.
var ErrExhausted = errors.New("compare-and-set kept conflicting")

// Retry is the one compare-and-set retry policy of sagad: it runs attempt —
// read, change, write conditionally on the revision read — until it
// succeeds, fails with an error that is not a conflict, ctx ends, or
// [MaxAttempts] attempts conflicted. The first retry is immediate (a lost
// race usually resolves on the next read); later ones wait a random while
// up to a few milliseconds growing with the attempt, so writers that just
// collided on a hot key do not collide again at once.
func Retry(ctx context.Context, attempt func(ctx context.Context) error) error {
	for i := range MaxAttempts {
		err := attempt(ctx)
		if !IsConflict(err) {
			return err
		}
		if i > 0 {
			timer := time.NewTimer(rand.N(time.Duration(min(i, 8)) * time.Millisecond))
			select {
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-timer.C:
			}
		}
	}
	return fmt.Errorf("%w after %d attempts", ErrExhausted, MaxAttempts)
}

// IsConflict reports whether err is a lost compare-and-set: one the server
// reported ([Conflict]) or an attempt's own [ErrConflict].
func IsConflict(err error) bool {
	return err != nil && (errors.Is(err, ErrConflict) || Conflict(err))
}
