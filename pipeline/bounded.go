package pipeline

import "sync"

// boundedMemo is a map of at most n entries, the oldest evicted first,
// which the phases' workers share: the decision memo (memo.go) and the
// memo of applied advances (advances.go). One mutex guards it: a put or a
// get is a map operation on a small key, no allocation. A nil memo holds
// nothing (the memo is off).
type boundedMemo[K comparable, V any] struct {
	mu sync.Mutex
	// set is the entries, each with the slot of ring that holds its key.
	set map[K]boundedEntry[V]
	// ring is the keys in the order they were put: the next put evicts
	// ring[next]'s. A taken entry's slot is cleared, so that the ring
	// holds nothing nobody needs (an advance's key holds a checkpoint) and
	// a put does not delete a key long gone (hashing a decision's key,
	// two strings of some 100 bytes, was most of a put).
	ring []K
	next int
}

// boundedEntry is a kept value and the ring slot that holds its key.
type boundedEntry[V any] struct {
	v    V
	slot int
}

// newBoundedMemo returns an empty memo of at most n entries, or nil when
// off.
func newBoundedMemo[K comparable, V any](n int, off bool) *boundedMemo[K, V] {
	if off {
		return nil
	}
	return &boundedMemo[K, V]{set: make(map[K]boundedEntry[V], n), ring: make([]K, n)}
}

// put keeps v under k; a key kept already stays where it is, with its value.
func (m *boundedMemo[K, V]) put(k K, v V) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.set[k]; ok {
		return
	}
	var zero K
	if old := m.ring[m.next]; old != zero {
		delete(m.set, old)
	}
	m.ring[m.next] = k
	m.set[k] = boundedEntry[V]{v: v, slot: m.next}
	m.next = (m.next + 1) % len(m.ring)
}

// get returns the value kept under k, forgetting it with take.
func (m *boundedMemo[K, V]) get(k K, take bool) (V, bool) {
	if m == nil {
		var zero V
		return zero, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.set[k]
	if ok && take {
		delete(m.set, k)
		var zero K
		m.ring[e.slot] = zero
	}
	return e.v, ok
}

// take reports whether a value was kept under k, and forgets it.
func (m *boundedMemo[K, V]) take(k K) bool {
	_, ok := m.get(k, true)
	return ok
}

// len is how many entries the memo holds.
func (m *boundedMemo[K, V]) len() int {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.set)
}
