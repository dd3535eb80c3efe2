package microreply_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/microreply"
	"github.com/sagad/sagad/internal/natstest"
)

// TestDetachedAnswers: a handler that answers on a goroutine of its own,
// after it returned, through Detach: answers and errors reach the caller
// with micro's headers, and (under -race) nothing races with micro's
// stats, which read the request when the handler returns.
func TestDetachedAnswers(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	svc, err := micro.AddService(nc, micro.Config{Name: "detach", Version: "1.0.0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, svc.AddEndpoint("x", micro.HandlerFunc(func(req micro.Request) {
		d := microreply.Detach(nc, req)
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _ := strconv.Atoi(string(req.Data()))
			if n%2 == 0 {
				_ = d.Respond([]byte("ok " + strconv.Itoa(n)))
				return
			}
			_ = d.Error("400", "odd "+strconv.Itoa(n), []byte("body"))
		}()
	}), micro.WithEndpointSubject("detach.x")))

	var calls sync.WaitGroup
	for i := range 100 {
		calls.Add(1)
		go func() {
			defer calls.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			msg, err := nc.RequestWithContext(ctx, "detach.x", []byte(strconv.Itoa(i)))
			if !assertNoErr(t, err) {
				return
			}
			if i%2 == 0 {
				assert.Equal(t, "ok "+strconv.Itoa(i), string(msg.Data))
				assert.Empty(t, msg.Header.Get(micro.ErrorHeader))
				return
			}
			assert.Equal(t, "odd "+strconv.Itoa(i), msg.Header.Get(micro.ErrorHeader))
			assert.Equal(t, "400", msg.Header.Get(micro.ErrorCodeHeader))
			assert.Equal(t, "body", string(msg.Data))
		}()
	}
	calls.Wait()
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestDetachedNoReply: a request published without a reply subject is
// answered with ErrNoReply, not published anywhere.
func TestDetachedNoReply(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	got := make(chan error, 1)
	svc, err := micro.AddService(nc, micro.Config{Name: "noreply", Version: "1.0.0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, svc.AddEndpoint("x", micro.HandlerFunc(func(req micro.Request) {
		got <- microreply.Detach(nc, req).Respond([]byte("x"))
	}), micro.WithEndpointSubject("noreply.x")))
	require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: "noreply.x", Data: []byte("1")}))
	select {
	case err := <-got:
		require.True(t, errors.Is(err, microreply.ErrNoReply), "%v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
}
