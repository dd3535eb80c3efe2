package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Claimed is the claim a phase message's first delivery may adopt: the
// claim the write that sent the message took for it in the checkpoint
// (EXECUTION's result taking REVIEW's claim, machine.Decide.Then). The
// header is a hint, never trusted: a delivery adopts only a claim the
// checkpoint holds with this very holder and expiry (pipeline's adopt).
type Claimed struct {
	Holder    string
	ExpiresAt time.Time
}

// maxClaimHolder bounds a holder in a Saga-Claim header: an instance id,
// "/" and a nuid-shaped id.
const maxClaimHolder = 256

// ErrBadClaimed: a Saga-Claim header that is not "<unix nanoseconds>:<holder>"
// with a canonical positive time and a holder of 1–256 printable ASCII
// characters (no space).
var ErrBadClaimed = errors.New("bad " + HeaderClaim + " header")

// DecodeClaimed reads a Saga-Claim header ("" is none: nil).
func DecodeClaimed(v string) (*Claimed, error) {
	if v == "" {
		return nil, nil
	}
	at, holder, ok := strings.Cut(v, ":")
	ns, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || ns <= 0 || !canonicalInt(ns, at) {
		return nil, fmt.Errorf("%w: time %q", ErrBadClaimed, PrintableKey(at))
	}
	if !validHolder(holder) {
		return nil, fmt.Errorf("%w: holder %q", ErrBadClaimed, PrintableKey(holder))
	}
	return &Claimed{Holder: holder, ExpiresAt: time.Unix(0, ns).UTC()}, nil
}

// validHolder reports whether h can stand in a Saga-Claim header.
func validHolder(h string) bool {
	if h == "" || len(h) > maxClaimHolder {
		return false
	}
	for i := 0; i < len(h); i++ {
		if h[i] <= ' ' || h[i] > '~' {
			return false
		}
	}
	return true
}

// EncodeClaimed is the Saga-Claim header of claim ex; ok false when ex
// cannot be carried (its holder is not printable ASCII): the message then
// goes without it, and its delivery claims by compare-and-set.
func EncodeClaimed(ex *capsule.ExecutionClaim) (string, bool) {
	if ex == nil || !validHolder(ex.Holder) || ex.ExpiresAt.UnixNano() <= 0 {
		return "", false
	}
	return strconv.FormatInt(ex.ExpiresAt.UnixNano(), 10) + ":" + ex.Holder, true
}
