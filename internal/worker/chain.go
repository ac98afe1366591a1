package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
)

// The audit chain: every audit event a worker publishes names its
// worker's chain (one per worker run), its position in it and the hash
// of the event before it, inside its signed data; every checkpointEvery
// events, or checkpointPeriod after the last checkpoint, the worker
// publishes a signed checkpoint naming the chain's length and head, as
// Certificate Transparency signs its tree heads. `toolctl audit --verify`
// checks both (internal/auditchain): an event removed, changed or
// inserted breaks the chain or its signature.

// Checkpoint cadence: every checkpointEvery events, checkpointPeriod
// after the last checkpoint when events came since, and every
// LivenessPeriod in any case while the worker runs (its chain's sign of
// life: `toolctl audit --verify` takes a chain without a closing
// checkpoint whose last checkpoint is older than three of them for one
// whose worker died, and its tail as lost).
const (
	checkpointEvery  = 100
	checkpointPeriod = 10 * time.Second
	// LivenessPeriod is the longest a running worker goes without
	// checkpointing its chain.
	LivenessPeriod = events.AuditLivenessPeriod
)

// auditChain is a worker's chain: its id, length and head.
type auditChain struct {
	mu         sync.Mutex
	id         string
	seq        uint64
	head       string
	checkpoint time.Time // when the last checkpoint was made
	unchecked  int       // events since it
	made       uint64    // checkpoints made (their dedup ids)
	closed     bool      // the closing checkpoint is made
}

// link encodes an audit event as the chain's next link, unsigned (the
// chain hashes its signing input, not its signature: the signature is
// made afterwards, out of the chain's lock, with the other events of its
// batch), and the checkpoint that is due after it (nil when none is).
func (c *auditChain) link(w *Worker, subject, id, typ string, data *events.AuditData) (u events.Unsigned, checkpoint *nats.Msg, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start(w)
	data.Chain, data.Seq, data.Prev = c.id, c.seq+1, c.head
	u, err = events.EncodeUnsigned(subject, events.Attrs{ID: id, Source: w.source, Type: typ}, data, events.Binary)
	if err != nil {
		return u, nil, err
	}
	c.seq, c.head = c.seq+1, events.EventHash(u.Input())
	c.unchecked++
	if c.unchecked >= checkpointEvery || time.Since(c.checkpoint) >= checkpointPeriod {
		checkpoint, err = c.checkpointMsg(w)
		if err != nil {
			w.log.Error("audit checkpoint not made", "chain", c.id, "err", err)
			err = nil
		}
	}
	return u, checkpoint, nil
}

// start names the chain (c.mu held).
func (c *auditChain) start(w *Worker) {
	if c.id == "" {
		c.id = tokenOr(w.cfg.Name, "worker") + "-" + events.NewID()
		c.checkpoint = time.Now()
	}
}

// checkpointMsg is the signed checkpoint of the chain as it stands
// (c.mu held); d's Opening, Anchor and Final are kept.
func (c *auditChain) checkpointMsg(w *Worker, d ...events.AuditCheckpointData) (*nats.Msg, error) {
	c.unchecked, c.checkpoint = 0, time.Now()
	var cp events.AuditCheckpointData
	if len(d) > 0 {
		cp = d[0]
	}
	cp.Final = cp.Final || c.closed
	cp.Chain, cp.Seq, cp.Head, cp.Worker, cp.Time = c.id, c.seq, c.head, w.cfg.Name, c.checkpoint.UTC()
	c.made++
	id := c.id + ":checkpoint:" + strconv.FormatUint(c.seq, 10) + ":" + strconv.FormatUint(c.made, 10)
	return events.EncodeData(events.AuditCheckpointSubject(tokenOr(w.cfg.Name, "_")),
		events.Attrs{ID: id, Source: w.source, Type: events.TypeAuditCheckpoint, Sign: w.sign},
		cp, events.Binary)
}

// openChain starts the worker run's chain with its opening checkpoint,
// anchored to the last checkpoint the audit stream holds (another run's,
// empty when none), then checkpoints it every LivenessPeriod until stop
// is closed.
func (w *Worker) openChain(ctx context.Context, stop <-chan struct{}) {
	anchor, anchorTime := "", time.Time{}
	if s, err := w.js.Stream(ctx, bus.StreamAudit); err == nil {
		if m, err := s.GetLastMsgForSubject(ctx, events.AuditCheckpointSubject(">")); err == nil {
			var cp events.AuditCheckpointData
			if _, err := events.DecodeData(m.Header, m.Data, &cp); err == nil {
				anchor, anchorTime = cp.Chain+":"+strconv.FormatUint(cp.Seq, 10)+":"+cp.Head, cp.Time
			}
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			w.log.Warn("audit chain: the last checkpoint cannot be read; opening unanchored", "err", err)
		}
	}
	c := &w.chain
	c.mu.Lock()
	c.start(w)
	m, err := c.checkpointMsg(w, events.AuditCheckpointData{Opening: true, Anchor: anchor, AnchorTime: anchorTime})
	c.mu.Unlock()
	if err != nil {
		w.log.Error("audit chain: opening checkpoint not made", "chain", c.id, "err", err)
	} else {
		w.enqueueAudit(m, "", "")
	}
	go func() {
		t := time.NewTicker(LivenessPeriod)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				c.mu.Lock()
				if c.closed || time.Since(c.checkpoint) < LivenessPeriod/2 {
					c.mu.Unlock()
					continue
				}
				m, err := c.checkpointMsg(w)
				c.mu.Unlock()
				if err == nil {
					w.enqueueAudit(m, "", "")
				}
			}
		}
	}()
}

// flushCheckpoint publishes the chain's closing checkpoint (a stopping
// worker's last word, even with no event: its chain opened) and returns
// it; nil when the chain never opened.
func (w *Worker) flushCheckpoint() *nats.Msg {
	c := &w.chain
	c.mu.Lock()
	if c.id == "" {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	m, err := c.checkpointMsg(w)
	c.mu.Unlock()
	if err != nil {
		w.log.Error("audit checkpoint not made", "chain", c.id, "err", err)
		return nil
	}
	w.enqueueAudit(m, "", closingKey)
	return m
}

// closingKey tracks the closing checkpoint among the calls' audit events.
const closingKey = "\x00closing"

// awaitClosing waits until deadline for the closing checkpoint to be
// stored, and reports whether it was.
func (w *Worker) awaitClosing(deadline time.Time) bool {
	q := &w.obs.auditQueue
	if done := q.awaiting(closingKey); done != nil {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
	return len(q.abandon(closingKey)) == 0
}
