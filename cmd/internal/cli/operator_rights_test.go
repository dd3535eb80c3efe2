package cli_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// operatorRights are the only rights the operator has: publish capsules,
// call the admin service, receive its own replies. No JetStream API.
var operatorRights = &server.Permissions{
	Publish:   &server.SubjectPermission{Allow: []string{store.IntakeSubject, adminsvc.SubjectPrefix + ".>"}},
	Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
}

// TestOperatorReadsThroughSagadOnly runs every sagactl read as a user with
// [operatorRights] only: publish, wait, status, list (paged), history,
// watch, report, pending and completion all work, through sagad's admin
// service, while the same user cannot read a bucket itself.
func TestOperatorReadsThroughSagadOnly(t *testing.T) {
	t.Parallel()
	s := natstest.RunServerWith(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "sagad", Password: "sagad-pw"},
			{Username: "operator", Password: "operator-pw", Permissions: operatorRights},
		}
	})
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("sagad", "sagad-pw"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	workspace := capsuletest.Workspace(t)
	logger := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: logger, Workspace: workspace, Workers: 4,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	svc, err := adminsvc.Start(nc, p.Admin(), adminsvc.Config{Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })

	url := strings.Replace(s.ClientURL(), "nats://", "nats://operator:operator-pw@", 1)
	op := func(args ...string) result { return run(t, append([]string{"--nats-url", url}, args...)...) }

	// The operator has no JetStream API: binding a bucket is refused.
	onc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(onc.Close)
	ojs, err := jetstream.New(onc)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = ojs.KeyValue(short, store.CheckpointsBucket)
	require.Error(t, err, "the operator must not reach JetStream's API")

	own := func(d capsuletest.Doc) capsuletest.Doc {
		name := "own-" + d.ID() + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(workspace, name), []byte("x"), 0o644))
		return d.Set("target", "file:"+name).Set("constraints.resource_locks_required", []any{name})
	}
	var ids []string
	for range 3 {
		doc := own(capsuletest.New())
		r := op("publish", file(t, doc.Sealed(t)))
		require.Equal(t, cli.ExitOK, r.code, r.errOut)
		require.Equal(t, doc.ID()+"\n", r.out)
		r = op("wait", "--timeout", "30s", doc.ID())
		require.Equal(t, cli.ExitOK, r.code, "stdout %s stderr %s", r.out, r.errOut)
		require.Regexp(t, `(?m)^state:\s+completed$`, r.out)
		ids = append(ids, doc.ID())
	}
	id := ids[0]

	// publish --wait: the status, and wait's exit code.
	halting := own(capsuletest.New().Stub(map[string]any{"fail": "worker out of disk"}))
	r := op("publish", "--wait", "--timeout", "30s", file(t, halting.Sealed(t)), "-o", "json")
	require.Equal(t, cli.ExitFailure, r.code, "halted: %s", r.errOut)
	var hs map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &hs))
	require.Equal(t, "halted", hs["state"])
	require.Equal(t, halting.ID(), hs["capsule_id"])

	r = op("status", id, "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &st))
	require.Equal(t, id, st["capsule_id"])
	require.Equal(t, "completed", st["state"])

	r = op("status", capsuletest.NewID())
	require.Equal(t, cli.ExitNotFound, r.code, r.errOut)

	r = op("list", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &list))
	require.Len(t, list, 4)
	r = op("list", "--limit", "2")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.errOut, "showing the newest 2 of 4 capsules")

	// Paging: one capsule a page, newest first, every capsule once.
	a := adminsvc.NewClient(onc, adminsvc.ClientConfig{})
	var paged []string
	req := adminsvc.ListRequest{Limit: 1, State: string(capsule.Completed)}
	for {
		page, err := a.List(ctx, req)
		require.NoError(t, err)
		require.Equal(t, 3, page.Total)
		for _, s := range page.Items {
			paged = append(paged, s.CapsuleID)
		}
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	require.Equal(t, []string{ids[2], ids[1], ids[0]}, paged)

	r = op("history", id)
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "completed")
	require.Equal(t, "received", eventKinds(t, r.out)[0])

	r = op("watch", id, "--since", "10m", "--count", "15", "--timeout", "20s")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Len(t, watchLines(t, r.out), 15)
	r = op("watch", "--timeout", "300ms")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	r = op("report", id)
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "# Capsule report: `"+id+"`")
	r = op("report", id, "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var rep cli.ReportData
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	require.NotNil(t, rep.Capsule)
	require.NotEmpty(t, rep.Events)

	r = op("pending")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	r = op("__complete", "status", id[:8])
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Equal(t, id+"\n:4\n", firstLines(r.out))
}
