package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
)

// record is what the calls bucket holds per call id: the claim.
type record struct {
	State     string    `json:"state"` // running, parked, executing, done
	Worker    string    `json:"worker"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// Result is kept here only when it could not be published, so that
	// the redelivery publishes it instead of reporting interrupted.
	Result *events.ResultData `json:"result,omitempty"`
	// Decision is the gate's decision on the running call and DecidedAt
	// when its judgement began, written by the call's heartbeats: a
	// redelivery that finds the call interrupted audits it as allowed.
	Decision  *events.Decision `json:"decision,omitempty"`
	DecidedAt time.Time        `json:"decided_at,omitzero"`
	// Audit are the call's audit events a stopping worker could not
	// store (and its chain's closing checkpoint, when that could not be
	// stored either), exactly as published: the redelivery publishes
	// them before it acks (auditwait.go).
	Audit []keptEvent `json:"audit,omitempty"`
}

// Record states in the calls bucket.
const (
	stateRunning   = "running"   // claimed, running through the pipeline
	stateParked    = "parked"    // waiting for people; no worker holds it
	stateExecuting = "executing" // approved and running on a worker
	stateDone      = "done"      // finished; its result kept because publishing failed
)

// claim is a call's claim record being created in the calls bucket. The
// create is published as soon as the call is decoded and awaited only once
// the gate has allowed the call (just before anything runs it) or the
// call has ended without running, so its round trip overlaps validation
// and the gate. The create is conditional on the key having no record
// (the same as KeyValue.Create): of two deliveries of one call, one claim
// wins and the other finds the key taken.
//
// A pure call's claim (a built-in tool that only reads, tools.Tool.Pure,
// on its first delivery) is lazy: nothing is published unless the call
// parks, because running it twice changes nothing and its result, stored
// under the call's dedup id, is stored once (see forgo).
type claim struct {
	w      *Worker
	msg    callMsg
	key    string
	callID string
	start  time.Time
	rec    []byte    // the record, made when the create is published
	lazy   bool      // created only if the call parks
	box    *replyBox // where the create's acknowledgement comes
	reply  string    // its reply subject; "" when the publish could not start

	once sync.Once
	rev  uint64
	err  error
}

// claim starts creating key's claim record for the call msg carries,
// which started at start; a lazy claim (pure) waits to be needed.
func (w *Worker) claim(msg callMsg, key string, start time.Time, callID string, lazy bool) *claim {
	cl := &claim{w: w, msg: msg, key: key, callID: callID, start: start, lazy: lazy}
	if !lazy {
		cl.publish()
	}
	return cl
}

func (cl *claim) publish() {
	cl.rec, _ = json.Marshal(record{State: stateRunning, Worker: cl.w.cfg.Name, Started: cl.start, Heartbeat: cl.start})
	m := &nats.Msg{Subject: "$KV." + bus.BucketCalls + "." + cl.key, Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}, Data: cl.rec}
	if cl.box = cl.w.boxes.get(); cl.box != nil {
		cl.reply, _ = cl.box.publish(m)
	}
}

// forgo settles a lazy claim without a record: the pure call runs (or
// ended without parking) unclaimed; wait then returns revision 0, which
// the heartbeat takes as "no record to refresh". It does nothing to a
// claim that is not lazy or already settled.
func (cl *claim) forgo() {
	if cl.lazy {
		cl.once.Do(func() {})
	}
}

// wait returns the claim's revision, or jetstream.ErrKeyExists when the
// call was claimed before, or another error when the claim could not be
// made. Any answer but a revision is checked again with KeyValue.Create
// (see create), which also creates over a deleted record and says
// ErrKeyExists for a taken key however the server words it. A lazy claim
// not forgone is created now.
func (cl *claim) wait() (uint64, error) {
	cl.once.Do(func() {
		if cl.lazy {
			cl.publish()
		}
		rev, err := uint64(0), errNoBox
		if cl.reply != "" {
			rev, err = cl.box.wait(cl.reply, cl.w.cfg.publishTimeout)
		}
		cl.w.boxes.put(cl.box)
		if err == nil {
			cl.rev = rev
			return
		}
		cl.rev, cl.err = cl.create()
	})
	return cl.rev, cl.err
}

// claimRetryFor bounds how long a worker keeps trying to claim a call
// whose record bucket cannot answer, before handing the message back.
const claimRetryFor = 2 * time.Minute

// create creates the call's record with KeyValue.Create. While the bucket
// cannot answer (a cluster electing a new leader after a node died), it
// retries with backoff and keeps the message in progress, so that the
// wait does not spend the call's deliveries: naking each failure sent
// calls to the dead-letter stream unrun during an election. A claim that
// was stored although its answer was lost (the asynchronous create of
// claim included) is recognised as this worker's own.
func (cl *claim) create() (uint64, error) {
	w := cl.w
	gap := 250 * time.Millisecond
	deadline := time.Now().Add(claimRetryFor)
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(w.execCtx, w.cfg.publishTimeout)
		rev, err := w.calls.Create(ctx, cl.key, cl.rec)
		if errors.Is(err, jetstream.ErrKeyExists) {
			if e, gerr := w.calls.Get(ctx, cl.key); gerr == nil && bytes.Equal(e.Value(), cl.rec) {
				cancel()
				return e.Revision(), nil
			}
		}
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyExists) || w.execCtx.Err() != nil || time.Now().After(deadline) {
			return rev, err
		}
		w.log.Warn("claim failed; retrying", "call_id", cl.callID, "attempt", attempt+1, "retry_in", gap, "err", err)
		_ = cl.msg.InProgress()
		select {
		case <-w.execCtx.Done():
			return 0, err
		case <-time.After(gap):
		}
		gap = min(2*gap, 5*time.Second)
	}
}
