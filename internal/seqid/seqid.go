package seqid

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"

	"github.com/nats-io/nuid"
)

const (
	digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	base   = 62
	preLen = 12
	seqLen = 10
	// Len is the length of an id, nuid's.
	Len = preLen + seqLen
	// maxSeq is base^seqLen: the sequences a prefix can carry.
	maxSeq = uint64(839299365868340224)
)

// Gen makes ids. Its prefix is random (crypto/rand, as nuid's), so ids are
// unique across generators and processes as nuid's are: two generators
// share a prefix with odds of one in 62^12. Safe for concurrent use.
type Gen struct {
	pre [preLen]byte
	seq atomic.Uint64
}

// New returns a generator with a fresh random prefix and a random start
// below half the sequence space, so it can make at least 4 × 10^17 ids
// before Next falls back to nuid.
func New() *Gen {
	var g Gen
	var rb [preLen + 8]byte
	if _, err := rand.Read(rb[:]); err != nil {
		// crypto/rand does not fail on the platforms Go supports; nuid
		// makes a prefix of its own from it anyway.
		copy(g.pre[:], nuid.Next()[:preLen])
	} else {
		for i := range g.pre {
			g.pre[i] = digits[int(rb[i])%base]
		}
	}
	g.seq.Store(binary.BigEndian.Uint64(rb[preLen:]) % (maxSeq / 2))
	return &g
}

// AppendNext appends a new id to dst.
func (g *Gen) AppendNext(dst []byte) []byte {
	n := g.seq.Add(1)
	if n >= maxSeq {
		// Past the prefix's sequences: nuid's global generator (which
		// changes its prefix as needed) keeps the ids unique.
		return append(dst, nuid.Next()...)
	}
	dst = append(dst, g.pre[:]...)
	var s [seqLen]byte
	for i := seqLen - 1; i >= 0; i-- {
		s[i] = digits[n%base]
		n /= base
	}
	return append(dst, s[:]...)
}

// Next returns a new id.
func (g *Gen) Next() string {
	var b [Len]byte
	return string(g.AppendNext(b[:0]))
}
