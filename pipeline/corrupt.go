package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/runner"
	"github.com/sagad/sagad/store"
)

// A value of a capsule's state that sagad did not write (a checkpoint, its
// kept bytes, a budget or wave record: see package internal/corrupt) is
// corruption, not a transient failure: it reads the same every time, so
// retrying the message would retry forever. The capsule halts
// state_corrupt:<bucket> instead, the value is reported once, and the
// message is terminated.

// corrupted ends the delivery of a phase message about key whose state
// holds a value sagad did not write (err, carrying a [corrupt.Error]). raw
// and c are the capsule's kept bytes when they could be read.
func (p *Pipeline) corrupted(ctx context.Context, key string, raw []byte, c *capsule.Capsule, err error) runner.Delivery {
	e, _ := corrupt.As(err)
	p.corrupt.Report(err, "the capsule halts state_corrupt and the message is terminated")
	if herr := p.haltCorrupt(ctx, key, raw, c, e); herr != nil {
		// The halt could not be written (JetStream is failing): try
		// again later; the value is not reported again.
		return runner.Retry(fmt.Errorf("halt %s state_corrupt: %w", key, herr))
	}
	return runner.Term(metrics.TermStateCorrupt, err)
}

// haltCorrupt halts key's capsule with state_corrupt:<e's bucket>. With its
// checkpoint readable, through the state machine like an operator's halt;
// with the checkpoint itself corrupt, by writing in its place (at the
// corrupt value's revision) a halted checkpoint made from the kept bytes:
// the history it had is lost, and the halt says so.
func (p *Pipeline) haltCorrupt(ctx context.Context, key string, raw []byte, c *capsule.Capsule, e *corrupt.Error) error {
	reason := capsule.StateCorrupt(e.Bucket)
	if e.Bucket != corrupt.Checkpoints {
		_, err := p.admin.End(ctx, key, machine.End{State: capsule.Halted, Detail: reason.String()})
		if errors.Is(err, admin.ErrRefused) || errors.Is(err, store.ErrNotFound) || errors.Is(err, corrupt.ErrCorrupt) {
			return nil // ended already, or nothing to halt
		}
		return err
	}
	_, err := p.replaceCorrupt(ctx, key, raw, c, e.Revision, reason)
	return err
}

// replaceCorrupt writes, at revision rev of a corrupt checkpoint of key,
// the checkpoint of a capsule halted for reason, and emits its end. The
// capsule is the one raw holds (c), or, without kept bytes, one known by
// its key alone.
func (p *Pipeline) replaceCorrupt(ctx context.Context, key string, raw []byte, c *capsule.Capsule, rev uint64, reason capsule.HaltReason) (*capsule.Checkpoint, error) {
	now := p.cfg.Now().UTC()
	id, trace, wave, digest := key, "", "", ""
	var locks []string
	if c != nil {
		id, trace, wave, digest = c.CapsuleID, c.TraceID, c.WaveID, c.Integrity.SHA256
		locks = c.Constraints.ResourceLocksRequired
	}
	fresh := store.NewCheckpoint(key, id, trace, wave, digest, now)
	res, newRev, err := p.st.Replace(ctx, fresh, rev, machine.End{State: capsule.Halted, Detail: reason.String()}, now)
	if errors.Is(err, store.ErrConflict) {
		return nil, nil // written meanwhile: the new value decides
	}
	if err != nil {
		return nil, err
	}
	p.metrics.Ended(capsule.Halted, reason)
	return res.Checkpoint, p.st.Emit(ctx, res.Checkpoint, newRev, res.Transition, raw, locks)
}

// corruptDecision turns a phase's retry over a value sagad did not write
// (a budget or wave record, a continuation) into a halt with
// state_corrupt:<bucket>: retrying would read the same value again.
func (p *Pipeline) corruptDecision(d phases.Decision) phases.Decision {
	if d.Action != phases.Retry {
		return d
	}
	e, ok := corrupt.As(d.Err)
	if !ok {
		return d
	}
	p.corrupt.Report(d.Err, "the capsule halts state_corrupt")
	return machine.HaltWith(capsule.StateCorrupt(e.Bucket))
}
