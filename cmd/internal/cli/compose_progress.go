package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/store"
)

// progressEvery is how often compose asks sagad how far a run got.
const progressEvery = 250 * time.Millisecond

// terminal says w is a person's terminal: a character device, or a
// writer that says so itself (a test's stand-in for one).
func terminal(w io.Writer) bool {
	if t, ok := w.(interface{ IsTerminal() bool }); ok {
		return t.IsTerminal()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// composeProgress shows, on w when it is a terminal, how many of the
// run's steps sagad has received while the compose request is in flight:
// one line, rewritten in place ("composition ID run N: published 120/256
// steps"), ended once the request is answered. Read through the admin
// service, which sagad answers while it publishes; quiet when that is
// refused (a producer's credentials, several producers under the id) and
// for a document that starts no new run (the same document again). The
// returned func stops it and ends the line; call it before printing
// anything else.
func composeProgress(ctx context.Context, w io.Writer, nc *nats.Conn, id string) func() {
	if !terminal(w) {
		return func() {}
	}
	ad := adminsvc.NewClient(nc, adminsvc.ClientConfig{})
	status := func() (compose.Outcome, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return ad.CompositionStatus(ctx, adminsvc.CompositionRequest{CompositionID: id})
	}
	before := 0
	if o, err := status(); err == nil {
		before = o.Run
	} else if !errors.Is(err, store.ErrNotFound) {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	shown := false
	show := func() {
		o, err := status()
		if err != nil || o.Run <= before || o.Received == nil {
			return
		}
		fmt.Fprintf(w, "\r%s", publishProgressLine(o))
		shown = true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				show()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		show() // the count as the request ended
		if shown {
			fmt.Fprintln(w)
		}
	}
}

// publishProgressLine is the progress of run o: the steps sagad has received of
// those it publishes now (a step held until a loop before it passes is
// published later).
func publishProgressLine(o compose.Outcome) string {
	now := 0
	for _, s := range o.Steps {
		if s.State != compose.StepHeld {
			now++
		}
	}
	return fmt.Sprintf("composition %s run %d: published %d/%d steps", printable(o.CompositionID), o.Run, *o.Received, now)
}
