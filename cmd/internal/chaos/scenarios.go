package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"syscall"
	"time"
)

var randRead = rand.Read

// pause waits d or until ctx is done. Faults are scheduled in time; nothing
// here waits for a condition.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// sagadStorm kills sagads with -9 sz.kills times over the window, each
// restarted at once; with two sagads they take turns and the last kill
// takes both.
func sagadStorm(n int) func(context.Context, *env, size) error {
	return func(ctx context.Context, e *env, sz size) error {
		every := sz.window / time.Duration(sz.kills+1)
		for k := range sz.kills {
			if err := pause(ctx, every); err != nil {
				return err
			}
			victims := []int{k % n}
			if n > 1 && k == sz.kills-1 {
				victims = []int{0, 1}
			}
			for _, v := range victims {
				if err := e.killSagad(v); err != nil {
					return err
				}
			}
			for _, v := range victims {
				if err := e.startSagad(v); err != nil {
					return err
				}
			}
		}
		return pause(ctx, every)
	}
}

// natsKill kills the nats-server with -9 in the middle of the window and
// starts it again 2 s later; sagad keeps running and reconnects.
func natsKill(ctx context.Context, e *env, sz size) error {
	if err := pause(ctx, sz.window/3); err != nil {
		return err
	}
	if err := e.killNATS(0); err != nil {
		return err
	}
	if err := pause(ctx, 2*time.Second); err != nil {
		return err
	}
	if err := e.startNATS(0); err != nil {
		return err
	}
	return pause(ctx, sz.window*2/3)
}

// clusterKill: a node sagad is not connected to (node 3) is killed and
// restarted, then the node sagad is connected to (node 1), which comes back
// later.
func clusterKill(ctx context.Context, e *env, sz size) error {
	if len(e.nats) < 3 {
		return fmt.Errorf("%w: cluster scenario needs 3 nodes", errGaveUp)
	}
	step := sz.window / 4
	if err := pause(ctx, step); err != nil {
		return err
	}
	if err := e.killNATS(2); err != nil {
		return err
	}
	if err := pause(ctx, step); err != nil {
		return err
	}
	if err := e.startNATS(2); err != nil {
		return err
	}
	if err := pause(ctx, step); err != nil {
		return err
	}
	// R3 survives one lost node at a time: the restarted node must have
	// caught up before the next one goes.
	if err := e.waitHealthy(ctx, 2, 60*time.Second); err != nil {
		return err
	}
	if err := e.killNATS(0); err != nil {
		return err
	}
	if err := pause(ctx, step); err != nil {
		return err
	}
	return e.startNATS(0)
}

// waitHealthy polls node i's /healthz until it reports ok.
func (e *env) waitHealthy(ctx context.Context, i int, total time.Duration) error {
	deadline := time.Now().Add(total)
	for !e.nats[i].healthy(ctx) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s not healthy after %s", errGaveUp, e.nats[i].name, total)
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	e.logf("%s healthy", e.nats[i].name)
	return nil
}

// sigterm stops sagad with SIGTERM sz.kills times under load and starts it
// again once it exited (a graceful stop finishes or hands back its work).
func sigterm(ctx context.Context, e *env, sz size) error {
	every := sz.window / time.Duration(sz.kills+1)
	for range sz.kills {
		if err := pause(ctx, every); err != nil {
			return err
		}
		e.fault()
		e.logf("SIGTERM %s", e.sagads[0].name)
		if err := e.sagads[0].signal(syscall.SIGTERM, 30*time.Second); err != nil {
			return err
		}
		if err := e.startSagad(0); err != nil {
			return err
		}
	}
	return pause(ctx, every)
}

// diskFull runs with a file store too small for the load: writes are
// refused once it is full. Half way, nats-server is restarted with room
// (the disk freed), and every acknowledged capsule must then end.
//
// sagad must say so: its ERROR line naming the cause within
// --unhealthy-after of the store filling, and the line of its recovery
// once nats-server has room (the fault run before saw neither).
func diskFull(ctx context.Context, e *env, sz size) error {
	if err := pause(ctx, sz.window/2); err != nil {
		return err
	}
	if err := e.waitLog(ctx, 0, "jetstream writes are failing", unhealthyAfter+30*time.Second); err != nil {
		return err
	}
	if err := e.killNATS(0); err != nil {
		return err
	}
	if err := e.nats[0].setMaxFileStore(1 << 30); err != nil {
		return err
	}
	if err := e.startNATS(0); err != nil {
		return err
	}
	if err := e.waitLog(ctx, 0, "jetstream writes succeed again", 60*time.Second); err != nil {
		return err
	}
	return pause(ctx, sz.window/2)
}

// waitLog polls sagad i's log until it holds line, for at most total.
func (e *env) waitLog(ctx context.Context, i int, line string, total time.Duration) error {
	deadline := time.Now().Add(total)
	for {
		b, err := os.ReadFile(e.sagads[i].out)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(line)) {
			e.logf("%s logged %q", e.sagads[i].name, line)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %s did not log %q within %s", e.sagads[i].name, line, total)
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// arriveAfter starts the scenario's late nats-servers once the sagads have
// waited d for them, and fails if a sagad exited meanwhile: sagad waits for
// its NATS, it does not exit (an exited sagad would leave every capsule
// stuck, as nothing here starts it again).
func arriveAfter(d time.Duration) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		return arrive(ctx, e, d)
	}
}

func arrive(ctx context.Context, e *env, d time.Duration) error {
	if err := pause(ctx, d); err != nil {
		return err
	}
	for _, s := range e.sagads {
		if s.exited() {
			return fmt.Errorf("chaos: %s exited while its NATS was not up (see %s)", s.name, s.out)
		}
	}
	for i := len(e.nats) - 1; i >= 0 && !e.nats[i].running(); i-- {
		if err := e.startNATS(i); err != nil {
			return err
		}
	}
	return nil
}

// steady injects no fault: the scenario's fault was at the start.
func steady(ctx context.Context, _ *env, sz size) error {
	return pause(ctx, sz.window)
}
