package pipeline_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// TestForgedPhaseMessageBodyIsIgnored reproduces the body swap an audit found:
// a capsule waits at REVIEW (the phase is paused), someone publishes a
// different, sealed body on REVIEW's subject with the victim's headers — an
// approving script and another reviewer — and the phase is resumed. The
// capsule must end exactly as the original would (its reviewer rejects
// everything), and the kept bytes and the outcome must be the original ones.
func TestForgedPhaseMessageBodyIsIgnored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	a := f.admin(t)

	victim := f.own(t, capsuletest.New().Stub(map[string]any{"reviews": []any{"REJECTED"}}))
	original := victim.Sealed(t)
	var forgedDoc capsuletest.Doc
	require.NoError(t, json.Unmarshal(original, &forgedDoc))
	forgedDoc = forgedDoc.Stub(map[string]any{"reviews": []any{"APPROVED"}}).Set("review.reviewer_agent_id", "stub-reviewer")
	delete(forgedDoc, "integrity")
	forged := forgedDoc.Sealed(t)
	require.NotEqual(t, original, forged)

	require.NoError(t, a.PausePhase(ctx, capsule.ReviewPhase))
	f.publish(t, original)
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.client.Status(ctx, victim.ID())
		return err == nil && s.Phase == int(capsule.ReviewPhase)
	}, "the victim never reached REVIEW")

	// The forged message is the one REVIEW gets: the victim's own message is
	// taken out of the queue (as if the forgery had overtaken it), so the
	// test does not depend on which of two queued messages wins the claim.
	phase5, err := f.js.Stream(ctx, store.PhaseStream(capsule.ReviewPhase))
	require.NoError(t, err)
	require.NoError(t, phase5.Purge(ctx))
	m := nats.NewMsg(store.PhaseSubject(capsule.ReviewPhase))
	m.Data = forged
	m.Header.Set(store.HeaderKey, victim.ID())
	m.Header.Set(store.HeaderCapsuleID, victim.ID())
	m.Header.Set(store.HeaderPhase, "5")
	m.Header.Set(store.HeaderCycle, "1")
	_, err = f.js.PublishMsg(ctx, m)
	require.NoError(t, err)
	require.NoError(t, a.ResumePhase(ctx, capsule.ReviewPhase))

	s := f.wait(t, victim.ID())
	require.Equal(t, capsule.Halted, s.State, "the forged approval did not count")
	require.Equal(t, capsule.ReviewRejectedTerminal().String(), s.HaltReason)

	kv, err := f.js.KeyValue(ctx, store.CapsulesBucket)
	require.NoError(t, err)
	kept, err := kv.Get(ctx, victim.ID())
	require.NoError(t, err)
	require.Equal(t, original, kept.Value(), "the kept bytes are the original ones")

	requireOutcomes(t, f, 1)
	outs, err := f.js.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	out, err := outs.GetLastMsgForSubject(ctx, store.OutcomeSubject(capsule.Halted))
	require.NoError(t, err)
	require.Equal(t, original, out.Data, "the outcome carries the original bytes")
}

// TestCachedBytesOfAnotherCapsuleAreNotUsed: phase messages carry no body,
// so a phase takes the capsule from the process's cache by key. A key can be
// forgotten (retention) and accepted again with other bytes, and a process
// that did not end the first capsule still holds its bytes. The test plants
// such bytes — another sealed capsule under the victim's key, whose reviewer
// approves — while the victim waits for REVIEW: the phase must see that they
// are not the capsule its checkpoint names, and act on the kept bytes.
func TestCachedBytesOfAnotherCapsuleAreNotUsed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	a := f.admin(t)

	victim := f.own(t, capsuletest.New().Stub(map[string]any{"reviews": []any{"REJECTED"}}))
	original := victim.Sealed(t)
	var otherDoc capsuletest.Doc
	require.NoError(t, json.Unmarshal(original, &otherDoc))
	otherDoc = otherDoc.Stub(map[string]any{"reviews": []any{"APPROVED"}}).Set("review.reviewer_agent_id", "stub-reviewer")
	delete(otherDoc, "integrity")
	other := otherDoc.Sealed(t)
	otherCapsule, err := store.DecodeCapsule(other)
	require.NoError(t, err)

	require.NoError(t, a.PausePhase(ctx, capsule.ReviewPhase))
	f.publish(t, original)
	phase5, err := f.js.Stream(ctx, store.PhaseStream(capsule.ReviewPhase))
	require.NoError(t, err)
	var queued *jetstream.RawStreamMsg
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		queued, err = phase5.GetLastMsgForSubject(ctx, store.PhaseSubject(capsule.ReviewPhase))
		return err == nil
	}, "the victim never reached REVIEW")
	require.Empty(t, queued.Data, "a phase message carries no capsule bytes")
	require.Equal(t, victim.ID(), queued.Header.Get(store.HeaderKey))

	pipeline.CacheOf(f.pipe).Seed(victim.ID(), other, otherCapsule)
	require.NoError(t, a.ResumePhase(ctx, capsule.ReviewPhase))

	s := f.wait(t, victim.ID())
	require.Equal(t, capsule.Halted, s.State, "the other capsule's approving reviewer did not count")
	require.Equal(t, capsule.ReviewRejectedTerminal().String(), s.HaltReason)
	requireOutcomes(t, f, 1)
	outs, err := f.js.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	out, err := outs.GetLastMsgForSubject(ctx, store.OutcomeSubject(capsule.Halted))
	require.NoError(t, err)
	require.Equal(t, original, out.Data, "the outcome carries the victim's bytes")
}
