package pipeline_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

func dirSize(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if i, err := d.Info(); err == nil {
				n += i.Size()
			}
		}
		return nil
	})
	return n
}

// TestMeasureFlood measures what one producer can put into sagad's data
// directory by flooding the intake with 500 KB messages for
// SAGA_MEASURE_FLOOD (a duration) under the default quota, or without any
// with SAGA_MEASURE_NO_QUOTA=1. It is a measurement, skipped unless asked:
//
//	SAGA_MEASURE_FLOOD=1.5s go test -run TestMeasureFlood -v ./pipeline/
func TestMeasureFlood(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("SAGA_MEASURE_FLOOD"))
	if err != nil || d <= 0 {
		t.Skip("a measurement: set SAGA_MEASURE_FLOOD to a duration")
	}
	dir := t.TempDir()
	s := natstest.RunServerWith(t, func(o *server.Options) { o.StoreDir = dir })
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	cfg := pipeline.Config{Workspace: capsuletest.Workspace(t), Executors: executors.NewRegistry()}
	if os.Getenv("SAGA_MEASURE_NO_QUOTA") != "" {
		cfg.IntakeQuota = store.IntakeQuota{MaxPending: 1 << 40}
		cfg.IntakeRate = pipeline.IntakeRate{Msgs: -1, Bytes: -1}
	}
	p, err := pipeline.New(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	before := dirSize(dir)
	body := []byte(`{"x":"` + strings.Repeat("a", 500*1024) + `"}`)
	start := time.Now()
	var ok, refused int
	var futures []jetstream.PubAckFuture
	for time.Since(start) < d {
		f, err := js.PublishAsync(store.IntakeProducerPrefix+"mallory", body)
		if err != nil {
			refused++
			continue
		}
		futures = append(futures, f)
		if len(futures) >= 64 {
			for _, f := range futures {
				select {
				case <-f.Ok():
					ok++
				case <-f.Err():
					refused++
				}
			}
			futures = futures[:0]
		}
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
			ok++
		case <-f.Err():
			refused++
		}
	}
	at := dirSize(dir)
	t.Logf("in %s: accepted %d (%.1f MB), refused %d; data dir +%.1f MB", time.Since(start).Round(time.Millisecond), ok, float64(ok*len(body))/1e6, refused, float64(at-before)/1e6)
	time.Sleep(5 * time.Second) //nolint:forbidigo // a measurement of what the next seconds add
	t.Logf("5 s later: data dir +%.1f MB", float64(dirSize(dir)-before)/1e6)
}
