package capsule

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// ChainStepID is the capsule id of step (from 0) of chain chainID: a UUID
// (version 8, RFC 9562) made of the SHA-256 of both, in canonical lower case,
// so publishing the same chain again publishes the same capsules and
// `sagactl chain` finds every step without an index.
func ChainStepID(chainID string, step int) string {
	h := sha256.Sum256([]byte("sagad chain\x00" + chainID + "\x00" + strconv.Itoa(step)))
	h[6] = h[6]&0x0f | 0x80 // version 8: custom
	h[8] = h[8]&0x3f | 0x80 // RFC 9562 variant
	s := hex.EncodeToString(h[:16])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
