package pipeline_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// publishAs publishes raw as producer does through its account (which maps
// its saga.intake to saga.intake.<producer>) and returns the intake
// sequence.
func (f *fixture) publishAs(t *testing.T, producer string, raw []byte) uint64 {
	t.Helper()
	ack, err := f.js.Publish(context.Background(), store.IntakeProducerPrefix+producer, raw)
	require.NoError(t, err)
	return ack.Sequence
}

// TestWaveHogging plays mallory, a producer a wave does not admit, against
// it: her capsules halt wave_not_admitted:<wave> at AUTOMATED_GATES and
// reserve nothing, so alice's capsules get the whole wave; wave show names
// who holds the reservations, per producer.
func TestWaveHogging(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()
	_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "wh", budget.WaveChange{Tokens: ptr(int64(3000)), Producers: &[]string{"alice"}})
	require.NoError(t, err)

	// Mallory asks for the whole wave first.
	for range 3 {
		d := waveDoc(t, f, "wh", "slow")
		f.publishAs(t, "mallory", d.Sealed(t))
		s := f.wait(t, d.ID())
		require.Equal(t, capsule.Halted, s.State)
		require.Equal(t, capsule.WaveNotAdmitted("wh").String(), s.HaltReason)
		require.Equal(t, "mallory", s.Producer)
	}
	w := f.waveOf(t, "wh")
	require.Zero(t, w.Holders, "mallory holds nothing")
	require.Equal(t, capsule.Usage{}, w.Reserved)

	// Alice's two and one of sagad's own intake are admitted.
	var mine []capsuletest.Doc
	for range 2 {
		d := waveDoc(t, f, "wh", "slow")
		f.publishAs(t, "alice", d.Sealed(t))
		mine = append(mine, d)
	}
	own := waveDoc(t, f, "wh", "slow")
	f.publish(t, own.Sealed(t))
	mine = append(mine, own)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return f.waveOf(t, "wh").Holders == 3
	}, "alice's capsules and sagad's own are admitted")
	info, err := f.pipe.Admin().Wave(ctx, "wh")
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, info.Producers)
	require.Equal(t, map[string]budget.ProducerHold{
		"alice": {Capsules: 2, Reserved: capsule.Usage{Tokens: 2000, Dollars: 10}},
		"-":     {Capsules: 1, Reserved: capsule.Usage{Tokens: 1000, Dollars: 5}},
	}, info.Holders)

	for range mine {
		f.gate <- struct{}{}
	}
	for _, d := range mine {
		require.Equal(t, capsule.Completed, f.wait(t, d.ID()).State)
	}
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return f.waveOf(t, "wh").Holders == 0
	}, "every reservation released")
	info, err = f.pipe.Admin().Wave(ctx, "wh")
	require.NoError(t, err)
	require.Empty(t, info.Holders)
}

// TestIntakeFlood plays mallory flooding the intake: past her backlog
// quota JetStream refuses her publishes (nothing is stored), and a message
// over the size bound is refused whoever sends it; alice's publishes still
// go through, and everything accepted is received once RECEPTION runs.
func TestIntakeFlood(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.IntakeQuota = store.IntakeQuota{MaxPending: 5, MaxMsgBytes: 64 << 10}
		c.IntakeRate = pipeline.IntakeRate{Msgs: -1, Bytes: -1}
	})
	ctx := context.Background()
	require.NoError(t, f.pipe.Admin().PausePhase(ctx, capsule.Reception))

	var seqs []uint64
	for range 5 {
		seqs = append(seqs, f.publishAs(t, "mallory", f.own(t, capsuletest.New()).Sealed(t)))
	}
	_, err := f.js.Publish(ctx, store.IntakeProducerPrefix+"mallory", f.own(t, capsuletest.New()).Sealed(t))
	require.Error(t, err, "the sixth is over mallory's backlog")
	require.Contains(t, err.Error(), "maximum messages per subject exceeded")
	alice := f.publishAs(t, "alice", f.own(t, capsuletest.New()).Sealed(t))
	_, err = f.js.Publish(ctx, store.IntakeProducerPrefix+"alice", []byte(`{"x":"`+strings.Repeat("a", 64<<10)+`"}`))
	require.Error(t, err, "over the message size bound")
	st, err := f.js.Stream(ctx, store.IntakeStream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(6), info.State.Msgs, "only what the quota let in is stored")

	require.NoError(t, f.pipe.Admin().ResumePhase(ctx, capsule.Reception))
	for _, seq := range append(seqs, alice) {
		natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
			cps, err := f.pipe.Checkpoints().List(ctx)
			require.NoError(t, err)
			for _, cp := range cps {
				if cp.IntakeSeq == seq {
					return cp.Producer != ""
				}
			}
			return false
		}, "intake message %d received", seq)
	}
}

// TestIntakeRate: a producer over its rate has its intake delayed, never
// dropped, and another producer's capsule is received meanwhile.
func TestIntakeRate(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.IntakeRate = pipeline.IntakeRate{Msgs: 2, Bytes: -1}
	})
	ctx := context.Background()
	received := func(producer string) int {
		cps, err := f.pipe.Checkpoints().List(ctx)
		require.NoError(t, err)
		n := 0
		for _, cp := range cps {
			if cp.Producer == producer {
				n++
			}
		}
		return n
	}
	for range 8 {
		f.publishAs(t, "mallory", f.own(t, capsuletest.New()).Sealed(t))
	}
	f.publishAs(t, "alice", f.own(t, capsuletest.New()).Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return received("alice") == 1 }, "alice's capsule received")
	require.Less(t, received("mallory"), 8, "mallory's flood is still being taken at her rate")
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return received("mallory") == 8 }, "all of mallory's capsules received in the end: "+strconv.Itoa(received("mallory")))
}
