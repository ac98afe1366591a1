package worker

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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

// Checkpoint cadence.
const (
	checkpointEvery  = 100
	checkpointPeriod = 10 * time.Second
)

// auditChain is a worker's chain: its id, length and head.
type auditChain struct {
	mu         sync.Mutex
	id         string
	seq        uint64
	head       string
	checkpoint time.Time // when the last checkpoint was made
	unchecked  int       // events since it
}

// link encodes an audit event as the chain's next link, and the
// checkpoint that is due after it (nil when none is).
func (c *auditChain) link(w *Worker, subject, id, typ string, data *events.AuditData) (m, checkpoint *nats.Msg, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id == "" {
		c.id = tokenOr(w.cfg.Name, "worker") + "-" + events.NewID()
		c.checkpoint = time.Now()
	}
	data.Chain, data.Seq, data.Prev = c.id, c.seq+1, c.head
	var hash string
	sign := func(input []byte) (string, string, error) {
		hash = events.EventHash(input)
		if w.sign == nil {
			return "", "", nil
		}
		return w.sign(input)
	}
	m, err = events.EncodeData(subject, events.Attrs{ID: id, Source: w.source, Type: typ, Sign: sign}, data, events.Binary)
	if err != nil {
		return nil, nil, err
	}
	c.seq, c.head = c.seq+1, hash
	c.unchecked++
	if c.unchecked >= checkpointEvery || time.Since(c.checkpoint) >= checkpointPeriod {
		checkpoint, err = c.checkpointMsg(w)
		if err != nil {
			w.log.Error("audit checkpoint not made", "chain", c.id, "err", err)
			err = nil
		}
	}
	return m, checkpoint, nil
}

// checkpointMsg is the signed checkpoint of the chain as it stands
// (c.mu held).
func (c *auditChain) checkpointMsg(w *Worker) (*nats.Msg, error) {
	c.unchecked, c.checkpoint = 0, time.Now()
	d := events.AuditCheckpointData{Chain: c.id, Seq: c.seq, Head: c.head, Worker: w.cfg.Name, Time: c.checkpoint.UTC()}
	return events.EncodeData(events.AuditCheckpointSubject(tokenOr(w.cfg.Name, "_")),
		events.Attrs{ID: c.id + ":checkpoint:" + strconv.FormatUint(c.seq, 10), Source: w.source, Type: events.TypeAuditCheckpoint, Sign: w.sign},
		d, events.Binary)
}

// flushCheckpoint publishes a checkpoint of the chain when events were
// published since the last one (a stopping worker's last word).
func (w *Worker) flushCheckpoint() {
	c := &w.chain
	c.mu.Lock()
	if c.unchecked == 0 {
		c.mu.Unlock()
		return
	}
	m, err := c.checkpointMsg(w)
	c.mu.Unlock()
	if err != nil {
		w.log.Error("audit checkpoint not made", "chain", c.id, "err", err)
		return
	}
	w.enqueueAudit(m, "")
}
