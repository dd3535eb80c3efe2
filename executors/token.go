package executors

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
)

// CompletionTokenBytes is how many random bytes a completion token holds;
// the token is their lowercase hex (64 characters).
const CompletionTokenBytes = 32

// NewCompletionToken returns a fresh completion token: the secret an
// executor call carries (Request.CompletionToken) and the [Completion] of
// accepted work must carry back. Anyone may be able to publish on
// saga.complete.>; only the worker that was called knows the token.
func NewCompletionToken() (string, error) {
	var b [CompletionTokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("executors: completion token: %w", err)
	}
	return hexString(b[:]), nil
}

// CompletionTokenHash is the SHA-256 (lowercase hex) of token: what a
// checkpoint keeps instead of the token, so that whoever can read
// checkpoints still cannot forge a completion.
func CompletionTokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hexString(sum[:])
}

// hexString is hex.EncodeToString of at most 32 bytes in one allocation
// (EncodeToString makes two): tokens and their hashes are made at every
// claim.
func hexString(b []byte) string {
	var h [2 * CompletionTokenBytes]byte
	n := hex.Encode(h[:], b)
	return string(h[:n])
}

// CompletionTokenMatches reports, in time independent of where they differ,
// whether token hashes to hash. An empty token or hash never matches.
func CompletionTokenMatches(hash, token string) bool {
	if hash == "" || token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(hash), []byte(CompletionTokenHash(token))) == 1
}
