package pipeline

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
)

func testMemoKey(i int) memoKey {
	return memoKey{key: fmt.Sprintf("capsule-%d", i), digest: "d", rev: 7, run: 1, cycle: 1, phase: capsule.AutomatedGates}
}

// TestDecisionMemoKey: a note is found under exactly the key it was put
// under, once; any field of the key that differs finds nothing.
func TestDecisionMemoKey(t *testing.T) {
	t.Parallel()
	k := testMemoKey(1)
	others := map[string]func(memoKey) memoKey{
		"key":    func(o memoKey) memoKey { o.key = "capsule-2"; return o },
		"digest": func(o memoKey) memoKey { o.digest = "e"; return o },
		"rev":    func(o memoKey) memoKey { o.rev++; return o },
		"run":    func(o memoKey) memoKey { o.run++; return o },
		"cycle":  func(o memoKey) memoKey { o.cycle++; return o },
		"phase":  func(o memoKey) memoKey { o.phase = capsule.Planning; return o },
	}
	for name, other := range others {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := newDecisionMemo(false)
			m.put(k, struct{}{})
			require.False(t, m.take(other(k)))
			require.True(t, m.take(k))
			require.False(t, m.take(k), "a note is taken once")
			require.Zero(t, m.len())
			require.Equal(t, memoKey{}, m.ring[0], "a taken note's slot is cleared")
		})
	}
	var off *decisionMemo = newDecisionMemo(true)
	require.Nil(t, off)
	off.put(k, struct{}{})
	require.False(t, off.take(k), "no memo: every catch-up runs its phases")
	require.Zero(t, off.len())
}

// TestDecisionMemoBounded: the memo never holds more than memoCap notes,
// the oldest evicted first, whatever is put and taken (a key put twice
// stays where it was first put).
func TestDecisionMemoBounded(t *testing.T) {
	t.Parallel()
	m := newDecisionMemo(false)
	const extra = 100
	for i := range memoCap + extra {
		m.put(testMemoKey(i), struct{}{})
		if i%3 == 0 {
			m.put(testMemoKey(i), struct{}{}) // redelivered: noted again
		}
		require.LessOrEqual(t, m.len(), memoCap)
	}
	require.False(t, m.take(testMemoKey(0)), "the oldest was evicted")
	require.True(t, m.take(testMemoKey(memoCap+extra-1)), "the newest is there")
	for i := range memoCap + extra {
		m.take(testMemoKey(i))
	}
	require.Zero(t, m.len())
}

// TestDecisionMemoConcurrent: the phases' workers put and take at once
// (run with -race). A take may miss a note the others' puts evicted in
// between, never find one twice.
func TestDecisionMemoConcurrent(t *testing.T) {
	t.Parallel()
	m := newDecisionMemo(false)
	var wg sync.WaitGroup
	var found atomic.Int64
	for w := range 64 {
		wg.Go(func() {
			for i := range 200 {
				k := testMemoKey(w*1000 + i)
				m.put(k, struct{}{})
				if m.take(k) {
					found.Add(1)
				}
				if m.take(k) {
					found.Add(1000_000)
				}
			}
		})
	}
	wg.Wait()
	require.Positive(t, found.Load())
	require.LessOrEqual(t, found.Load(), int64(64*200), "a note found twice")
	require.Zero(t, m.len())
}

// TestPlainAdvanceCoversDecision: the memo replays a plain advance only, so
// plainAdvance must refuse a decision any of whose fields says more. A
// field added to phases.Decision fails this test until plainAdvance (and
// the table here) knows it.
func TestPlainAdvanceCoversDecision(t *testing.T) {
	t.Parallel()
	require.True(t, plainAdvance(phases.AdvanceWith()))
	more := map[string]phases.Decision{
		"Action":   {Action: phases.Halt},
		"Halt":     {Action: phases.Advance, Halt: capsule.HaltReason{Code: capsule.CodeStateCorrupt}},
		"Findings": phases.AdvanceWith(capsule.Finding{Rule: 1}),
		"Delay":    {Action: phases.Advance, Delay: 1},
		"Err":      {Action: phases.Advance, Err: errors.New("x")},
		"Record":   {Action: phases.Advance, Record: &machine.Record{}},
		"Trigger":  {Action: phases.Advance, Trigger: capsule.Trigger("t")},
		"Reason":   {Action: phases.Advance, Reason: "r"},
		"Wait":     {Action: phases.Advance, Wait: true},
		"WaitFor":  {Action: phases.Advance, WaitFor: []string{"x"}},
	}
	typ := reflect.TypeFor[phases.Decision]()
	require.Equal(t, typ.NumField(), len(more), "a field of phases.Decision this test does not know")
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		d, ok := more[name]
		require.True(t, ok, "field %s", name)
		require.False(t, plainAdvance(d), "field %s", name)
	}
}

// BenchmarkDecisionMemo is a deferral's note and its catch-up's take, the
// memo's whole cost per deferred phase.
func BenchmarkDecisionMemo(b *testing.B) {
	m := newDecisionMemo(false)
	keys := make([]memoKey, 1024)
	for i := range keys {
		keys[i] = testMemoKey(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i%len(keys)]
			m.put(k, struct{}{})
			m.take(k)
			i++
		}
	})
}

// TestAdvanceMemoBounded: the memo of applied advances holds advanceCap
// results at most, the oldest evicted first; a taken one leaves it and its
// ring slot, so that the ring holds no checkpoint of it.
func TestAdvanceMemoBounded(t *testing.T) {
	t.Parallel()
	m := newAdvanceMemo(false)
	cps := make([]*capsule.Checkpoint, advanceCap+10)
	key := func(i int) advanceKey { return advanceKey{from: cps[i], phase: capsule.Planning} }
	for i := range cps {
		cps[i] = &capsule.Checkpoint{Key: "k"}
		m.put(key(i), machine.Result{Checkpoint: cps[i]})
		m.put(key(i), machine.Result{}) // a key kept already stays as it is
	}
	require.Equal(t, advanceCap, m.len())
	_, ok := m.get(key(9), false)
	require.False(t, ok, "the oldest were evicted")
	res, ok := m.get(key(10), false)
	require.True(t, ok)
	require.Same(t, cps[10], res.Checkpoint)
	res, ok = m.get(key(10), true)
	require.True(t, ok)
	require.Same(t, cps[10], res.Checkpoint)
	_, ok = m.get(key(10), false)
	require.False(t, ok, "taken")
	require.Equal(t, advanceCap-1, m.len())
	for _, k := range m.ring {
		require.NotSame(t, cps[10], k.from, "a taken result's slot is cleared")
	}
	require.Zero(t, (*advanceMemo)(nil).len())
}
