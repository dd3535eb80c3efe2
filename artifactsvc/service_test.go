package artifactsvc_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/artifactsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

type fixture struct {
	nc     *nats.Conn
	grants *artifactsvc.Grants
	st     *store.Store
}

func setup(t *testing.T) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	st, err := store.Ensure(context.Background(), js, store.Topology{Workspace: capsuletest.Workspace(t)})
	require.NoError(t, err)
	g := artifactsvc.NewGrants(0, nil)
	svc, err := artifactsvc.Start(nc, g, st.Artifacts, artifactsvc.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	return &fixture{nc: nc, grants: g, st: st}
}

// put stores an artifact of n content bytes (a JSON string) for capsule id.
func (f *fixture) put(t *testing.T, id string, cycle, n int) capsule.Artifact {
	t.Helper()
	content := []byte(`"` + strings.Repeat("x", n-2) + `"`)
	sum := sha256.Sum256(content)
	a := capsule.Artifact{SchemaVersion: "1.0", CapsuleID: id, Cycle: cycle, MediaType: "application/json",
		SHA256: hex.EncodeToString(sum[:]), Size: int64(n), CreatedAt: time.Now().UTC(), Content: content}
	ref, err := f.st.Artifacts.Put(context.Background(), a)
	require.NoError(t, err)
	a.Ref = ref
	return a
}

func (f *fixture) get(t *testing.T, req artifactsvc.Request) (artifactsvc.Reply, *artifactsvc.ErrorReply) {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	msg, err := f.nc.Request(artifactsvc.Subject, body, 5*time.Second)
	require.NoError(t, err)
	if msg.Header.Get(micro.ErrorCodeHeader) != "" {
		var e artifactsvc.ErrorReply
		require.NoError(t, json.Unmarshal(msg.Data, &e))
		return artifactsvc.Reply{}, &e
	}
	var r artifactsvc.Reply
	require.NoError(t, json.Unmarshal(msg.Data, &r))
	return r, nil
}

// fetch pages through ref the way a worker does.
func (f *fixture) fetch(t *testing.T, ref, token string) ([]byte, artifactsvc.Reply) {
	t.Helper()
	var out []byte
	for {
		r, e := f.get(t, artifactsvc.Request{Ref: ref, Token: token, Offset: int64(len(out))})
		require.Nil(t, e)
		require.Equal(t, int64(len(out)), r.Offset)
		out = append(out, r.Data...)
		if r.EOF {
			return out, r
		}
		require.NotEmpty(t, r.Data)
	}
}

// TestFetchByReference: a 2 MiB artifact, larger than a NATS message,
// comes back whole in pages, with its size and sha256 on every page.
func TestFetchByReference(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.put(t, "01JAAAAAAAAAAAAAAAAAAAAAAA", 1, 2<<20)
	revoke := f.grants.Grant("secret", a.CapsuleID, []string{a.Ref})
	got, last := f.fetch(t, a.Ref, "secret")
	require.True(t, bytes.Equal(a.Content, got))
	require.Equal(t, a.SHA256, last.SHA256)
	require.Equal(t, int64(2<<20), last.Size)

	r, e := f.get(t, artifactsvc.Request{Ref: a.Ref, Token: "secret", Offset: 10, Limit: 5})
	require.Nil(t, e)
	require.Equal(t, []byte(a.Content[10:15]), r.Data)
	require.False(t, r.EOF)

	revoke()
	_, e = f.get(t, artifactsvc.Request{Ref: a.Ref, Token: "secret"})
	require.NotNil(t, e, "a call's token is good only while the call runs")
	require.Equal(t, artifactsvc.CodeForbidden, e.Code)
}

// TestFetchRefusals: each way in that is not the current call's is refused
// with a code saying why. Before the service, nothing answered at all, and a
// worker had no way to the content but a blanket read of SAGA_ARTIFACTS.
func TestFetchRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	mine := f.put(t, "01JAAAAAAAAAAAAAAAAAAAAAAA", 1, 100)
	other := f.put(t, "01JBBBBBBBBBBBBBBBBBBBBBBB", 1, 100)
	f.grants.Grant("mine", mine.CapsuleID, []string{mine.Ref})
	f.grants.Grant("gone", "01JCCCCCCCCCCCCCCCCCCCCCCC", []string{"artifact:01JCCCCCCCCCCCCCCCCCCCCCCC/1"})
	for name, tc := range map[string]struct {
		req  artifactsvc.Request
		code string
	}{
		"wrong token":         {artifactsvc.Request{Ref: mine.Ref, Token: "guess"}, artifactsvc.CodeForbidden},
		"another capsule's":   {artifactsvc.Request{Ref: other.Ref, Token: "mine"}, artifactsvc.CodeForbidden},
		"another cycle's":     {artifactsvc.Request{Ref: "artifact:01JAAAAAAAAAAAAAAAAAAAAAAA/2", Token: "mine"}, artifactsvc.CodeForbidden},
		"no token":            {artifactsvc.Request{Ref: mine.Ref}, artifactsvc.CodeBadRequest},
		"not a ref":           {artifactsvc.Request{Ref: "file:/etc/passwd", Token: "mine"}, artifactsvc.CodeBadRequest},
		"negative offset":     {artifactsvc.Request{Ref: mine.Ref, Token: "mine", Offset: -1}, artifactsvc.CodeBadRequest},
		"offset past the end": {artifactsvc.Request{Ref: mine.Ref, Token: "mine", Offset: 101}, artifactsvc.CodeBadRequest},
		"granted, not stored": {artifactsvc.Request{Ref: "artifact:01JCCCCCCCCCCCCCCCCCCCCCCC/1", Token: "gone"}, artifactsvc.CodeNotFound},
	} {
		_, e := f.get(t, tc.req)
		require.NotNil(t, e, name)
		require.Equal(t, tc.code, e.Code, "%s: %s", name, e.Message)
		require.NotEmpty(t, e.Message, name)
	}
	got, _ := f.fetch(t, mine.Ref, "mine")
	require.Equal(t, []byte(mine.Content), got)
}

// FuzzDecodeRequest: the decoder of a worker's bytes never panics, and what
// it accepts names an artifact ref and a token.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"ref":"artifact:01JAAAAAAAAAAAAAAAAAAAAAAA/1","token":"t"}`,
		`{"ref":"artifact:x/1","token":"t","offset":5,"limit":10}`,
		`{"ref":"artifact:x/1","token":"t","extra":1}`,
		`{"ref":"artifact:x/1","token":"t"} {}`,
		`{}`, `null`, `[]`, ``, `{"ref":"artifact:/","token":"t","offset":-1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := artifactsvc.DecodeRequest(data)
		if err != nil {
			return
		}
		require.True(t, strings.HasPrefix(r.Ref, "artifact:"))
		require.NotEmpty(t, r.Token)
		require.GreaterOrEqual(t, r.Offset, int64(0))
		require.GreaterOrEqual(t, r.Limit, int64(0))
	})
}

// TestTwoSagads: every sagad hears every request; the one that made the
// call answers it, another that does not know the token stays out of the
// way, and a token nobody knows is still refused. With a queue group, half
// of the requests went to the sagad without the grant and were refused.
func TestTwoSagads(t *testing.T) {
	t.Parallel()
	f := setup(t)
	other := artifactsvc.NewGrants(0, nil)
	svc, err := artifactsvc.Start(f.nc, other, f.st.Artifacts, artifactsvc.Config{NotMineDelay: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	a := f.put(t, "01JAAAAAAAAAAAAAAAAAAAAAAA", 1, 1000)
	f.grants.Grant("secret", a.CapsuleID, []string{a.Ref})
	for range 20 {
		got, _ := f.fetch(t, a.Ref, "secret")
		require.Equal(t, []byte(a.Content), got)
	}
	_, e := f.get(t, artifactsvc.Request{Ref: a.Ref, Token: "guess"})
	require.NotNil(t, e)
	require.Equal(t, artifactsvc.CodeForbidden, e.Code)
}

// TestUnknownTokenFlood: requests with tokens no sagad holds wait out the
// not-mine delay in one bounded queue, not a goroutine each (20,000 such
// requests once took a sagad from 722 to 3,829 goroutines). Past the
// bound they go unanswered by this sagad; a holder's request is answered
// at once throughout, and the queue drains.
func TestUnknownTokenFlood(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	st, err := store.Ensure(context.Background(), js, store.Topology{Workspace: capsuletest.Workspace(t)})
	require.NoError(t, err)
	g := artifactsvc.NewGrants(0, nil)
	svc, err := artifactsvc.Start(nc, g, st.Artifacts, artifactsvc.Config{NotMineDelay: 300 * time.Millisecond, MaxDelayed: 64})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	f := &fixture{nc: nc, grants: g, st: st}
	a := f.put(t, "01JAAAAAAAAAAAAAAAAAAAAAAA", 1, 100)
	g.Grant("holder", a.CapsuleID, []string{a.Ref})

	flood, _ := natstest.Connect(t, s)
	inbox := nats.NewInbox()
	answers, err := flood.SubscribeSync(inbox)
	require.NoError(t, err)
	before := runtime.NumGoroutine()
	const n = 5000
	for i := range n {
		body := fmt.Sprintf(`{"ref":%q,"token":"guess-%d"}`, a.Ref, i)
		require.NoError(t, flood.PublishRequest(artifactsvc.Subject, inbox, []byte(body)))
	}
	require.NoError(t, flood.Flush())
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return svc.Dropped() > 0 }, "the queue never filled")
	require.Less(t, runtime.NumGoroutine()-before, 50, "no goroutine per refusal")
	_, e := f.get(t, artifactsvc.Request{Ref: a.Ref, Token: "holder"})
	require.Nil(t, e, "the holder's fetch is answered during the flood")

	// The queue drains: each queued request is refused once due, and a
	// later unknown token is refused again.
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		got, _, _ := answers.Pending()
		return int64(got) == n-svc.Dropped()
	}, "the queued refusals were not all answered")
	_, e = f.get(t, artifactsvc.Request{Ref: a.Ref, Token: "guess-again"})
	require.NotNil(t, e)
	require.Equal(t, artifactsvc.CodeForbidden, e.Code)
}
