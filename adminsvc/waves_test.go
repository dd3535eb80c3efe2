package adminsvc

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/rules"
)

func init() {
	schemaFor[VerbWaveSet], schemaFor[VerbWaveClose] = "wave-set-request", "wave-close-request"
	schemaFor[VerbWaveShow], schemaFor[VerbWaveList] = "wave-show-request", "list-request"
	replySchema[VerbWaveSet], replySchema[VerbWaveClose], replySchema[VerbWaveShow] = "wave-reply", "wave-reply", "wave-reply"
	replySchema[VerbWaveList] = "wave-list-reply"
}

// waveSetup is setup with a sweeper that looks every 50ms.
func waveSetup(t *testing.T) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	f := &fixture{nc: nc, workspace: capsuletest.Workspace(t)}
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: testLogger(t), Workspace: f.workspace, Workers: 4, SweepInterval: 50 * time.Millisecond,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
		Rules: rules.Config{DenyPaths: []string{".git", "infra"}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	svc, err := Start(nc, p.Admin(), Config{Logger: testLogger(t), Rules: p.Rules()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	f.client = NewClient(nc, ClientConfig{Timeout: 10 * time.Second})
	f.pipeline, err = client.NewClient(ctx, js)
	require.NoError(t, err)
	return f
}

func wave(t *testing.T, b []byte) admin.WaveInfo {
	t.Helper()
	var w admin.WaveInfo
	require.NoError(t, json.Unmarshal(b, &w))
	return w
}

func i64(v int64) *int64 { return &v }

// TestWaveVerbs drives wave.set, wave.show, wave.list and wave.close over
// NATS against a real pipeline, every request and reply checked against
// schemas/admin: a capsule too big for its wave waits, listed by wave.show,
// until the cap is raised; closing the wave halts the next waiter with
// wave_closed:<wave> and refuses later cap changes.
func TestWaveVerbs(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	ctx := context.Background()

	var list WaveListReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbWaveList, []byte(""), ""), &list))
	require.Empty(t, list.Waves)
	require.NotNil(t, list.Waves)

	w := wave(t, f.do(t, VerbWaveSet, WaveSetRequest{WaveID: "w1", Tokens: i64(3000), By: "ann", Reason: "sprint"}, ""))
	require.Equal(t, int64(3000), w.TokensCap)
	require.Equal(t, i64(3000), w.TokensLeft)
	require.Nil(t, w.DollarsLeft, "no dollar cap")
	require.Empty(t, w.Waiting)
	f.do(t, VerbWaveShow, WaveShowRequest{WaveID: "nope"}, CodeNotFound)

	big := capsuletest.New().Set("wave_id", "w1").Set("budget.tokens", 4000)
	f.publish(t, big)
	s := f.waitState(t, big.ID(), capsule.Waiting)
	require.Equal(t, "wave_too_small", s.WaitingOn, "bigger than the whole cap")
	// The continuation that lists a waiting capsule is written right after
	// its checkpoint.
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		w = wave(t, f.do(t, VerbWaveShow, WaveShowRequest{WaveID: "w1"}, ""))
		return len(w.Waiting) == 1
	}, "wave.show lists the waiting capsule")
	require.Equal(t, []string{big.ID()}, w.Waiting)
	require.Zero(t, w.Running)

	dollars := 50.0
	w = wave(t, f.do(t, VerbWaveSet, WaveSetRequest{WaveID: "w1", Tokens: i64(5000), Dollars: &dollars, By: "ann"}, ""))
	require.Equal(t, 50.0, w.DollarsCap)
	s = f.waitState(t, big.ID(), capsule.Completed)
	// The reservation is released with the end's effects, right after
	// the checkpoint records the end.
	var err error
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		w, err = f.client.Wave(ctx, "w1")
		return err == nil && w.Running == 0
	}, "released")
	require.Equal(t, s.BudgetUsed, w.Used)
	require.Equal(t, capsule.Usage{}, w.Reserved)
	require.Equal(t, i64(5000-s.BudgetUsed.Tokens), w.TokensLeft)

	huge := capsuletest.New().Set("wave_id", "w1").Set("budget.tokens", 9000)
	f.publish(t, huge)
	f.waitState(t, huge.ID(), capsule.Waiting)
	w = wave(t, f.do(t, VerbWaveClose, WaveCloseRequest{WaveID: "w1", By: "ann", Reason: "done"}, ""))
	require.True(t, w.Closed)
	s = f.waitState(t, huge.ID(), capsule.Halted)
	require.Equal(t, "wave_closed:w1", s.HaltReason)
	f.do(t, VerbWaveClose, WaveCloseRequest{WaveID: "w1", By: "ann"}, "")
	f.do(t, VerbWaveSet, WaveSetRequest{WaveID: "w1", Tokens: i64(1), By: "ann"}, CodeRefused)
	_, err = f.client.SetWave(ctx, WaveSetRequest{WaveID: "w1", Tokens: i64(1), By: "ann"})
	require.ErrorIs(t, err, admin.ErrRefused)

	f.do(t, VerbWaveSet, WaveSetRequest{WaveID: "w2", By: "ann"}, "")
	waves, err := f.client.Waves(ctx)
	require.NoError(t, err)
	require.Len(t, waves, 2)
	require.Equal(t, "w1", waves[0].WaveID)
	require.Equal(t, "w2", waves[1].WaveID)

	for verb, body := range map[string]string{
		VerbWaveSet:   `{"wave_id":"a.b","by":"ann"}`,
		VerbWaveClose: `{"wave_id":"w1"}`,
		VerbWaveShow:  `{"wave_id":""}`,
		VerbWaveList:  `{"all":true}`,
	} {
		f.do(t, verb, []byte(body), CodeBadRequest)
	}
	f.do(t, VerbWaveSet, []byte(`{"wave_id":"w3","tokens":-1,"by":"ann"}`), CodeBadRequest)
	f.do(t, VerbWaveSet, []byte(`{"wave_id":"w3","dollars":-1,"by":"ann"}`), CodeBadRequest)
}

func TestDecodeWaveRequest(t *testing.T) {
	t.Parallel()
	two := 2.5
	tests := []struct {
		name    string
		verb    string
		data    string
		want    any
		wantErr string
	}{
		{"set", VerbWaveSet, `{"wave_id":"w-1","tokens":3000,"dollars":2.5,"by":"ann"}`, WaveSetRequest{WaveID: "w-1", Tokens: i64(3000), Dollars: &two, By: "ann"}, ""},
		{"set no caps", VerbWaveSet, `{"wave_id":"w","by":"ann"}`, WaveSetRequest{WaveID: "w", By: "ann"}, ""},
		{"set zero cap", VerbWaveSet, `{"wave_id":"w","tokens":0,"by":"ann"}`, WaveSetRequest{WaveID: "w", Tokens: i64(0), By: "ann"}, ""},
		{"set without by", VerbWaveSet, `{"wave_id":"w"}`, nil, "by is required"},
		{"set bad id", VerbWaveSet, `{"wave_id":"w w","by":"ann"}`, nil, "want 1 to 64"},
		{"set long id", VerbWaveSet, `{"wave_id":"` + string(make([]byte, 0)) + `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","by":"ann"}`, nil, "want 1 to 64"},
		{"set negative tokens", VerbWaveSet, `{"wave_id":"w","tokens":-5,"by":"ann"}`, nil, "tokens -5"},
		{"set fractional tokens", VerbWaveSet, `{"wave_id":"w","tokens":1.5,"by":"ann"}`, nil, "cannot unmarshal"},
		{"set huge dollars", VerbWaveSet, `{"wave_id":"w","dollars":1e300,"by":"ann"}`, nil, "dollars 1e+300"},
		{"set unknown member", VerbWaveSet, `{"wave_id":"w","by":"ann","closed":true}`, nil, "unknown member"},
		{"close", VerbWaveClose, `{"wave_id":"w","by":"ann","reason":"done"}`, WaveCloseRequest{WaveID: "w", By: "ann", Reason: "done"}, ""},
		{"close without id", VerbWaveClose, `{"by":"ann"}`, nil, "want 1 to 64"},
		{"show", VerbWaveShow, `{"wave_id":"w"}`, WaveShowRequest{WaveID: "w"}, ""},
		{"list", VerbWaveList, ``, waveListRequest{}, ""},
		{"list {}", VerbWaveList, `{}`, waveListRequest{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeRequest(tt.verb, []byte(tt.data), 0)
			if tt.wantErr != "" {
				var re *requestError
				require.ErrorAs(t, err, &re)
				require.Contains(t, re.msg, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.NoError(t, validateSchema(t, schemaFor[tt.verb], []byte(orEmptyObject(tt.data))))
		})
	}
}

// TestWaveProducers: wave.set's admit list and who holds the reservations,
// in wave.set, wave.show and wave.list replies checked against
// schemas/admin.
func TestWaveProducers(t *testing.T) {
	t.Parallel()
	f := waveSetup(t)
	w := wave(t, f.do(t, VerbWaveSet, WaveSetRequest{WaveID: "w3", Producers: &[]string{"bob", "alice", "bob"}, By: "ann"}, ""))
	require.Equal(t, []string{"alice", "bob"}, w.Producers)

	// A capsule of sagad's own intake waits for the operator, holding its
	// reservation.
	held := capsuletest.New().Set("wave_id", "w3").Set("review.operator_gate", true)
	f.publish(t, held)
	f.waitState(t, held.ID(), capsule.WaitingForOperator)
	w = wave(t, f.do(t, VerbWaveShow, WaveShowRequest{WaveID: "w3"}, ""))
	require.Equal(t, 1, w.Holders["-"].Capsules)
	require.Equal(t, w.Reserved, w.Holders["-"].Reserved, "what it holds is all the wave holds")
	var list WaveListReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbWaveList, []byte(""), ""), &list))
	require.Len(t, list.Waves, 1)
	require.Equal(t, w.Holders, list.Waves[0].Holders)

	w = wave(t, f.do(t, VerbWaveSet, WaveSetRequest{WaveID: "w3", Producers: &[]string{}, By: "ann"}, ""))
	require.Empty(t, w.Producers, "[] admits any again")
	f.do(t, VerbWaveSet, []byte(`{"wave_id":"w3","producers":["a.b"],"by":"ann"}`), CodeBadRequest)
}
