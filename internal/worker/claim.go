package worker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
)

// claim is a call's claim record being created in the calls bucket. The
// create is published as soon as the call is decoded and awaited only once
// the gate has allowed the call (just before anything runs it) or the
// call has ended without running, so its round trip overlaps validation
// and the gate. The create is conditional on the key having no record
// (the same as KeyValue.Create): of two deliveries of one call, one claim
// wins and the other finds the key taken.
type claim struct {
	w   *Worker
	key string
	rec []byte
	f   jetstream.PubAckFuture // nil when the publish could not start

	once sync.Once
	rev  uint64
	err  error
}

// claim starts creating key's claim record for a call that started at
// start.
func (w *Worker) claim(key string, start time.Time) *claim {
	rec, _ := json.Marshal(record{State: stateRunning, Worker: w.cfg.Name, Started: start, Heartbeat: start})
	cl := &claim{w: w, key: key, rec: rec}
	m := &nats.Msg{Subject: "$KV." + bus.BucketCalls + "." + key, Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}, Data: rec}
	if f, err := w.js.PublishMsgAsync(m); err == nil {
		cl.f = f
	}
	return cl
}

// wait returns the claim's revision, or jetstream.ErrKeyExists when the
// call was claimed before, or another error when the claim could not be
// made. Any answer but a revision is checked again with KeyValue.Create,
// which also creates over a deleted record and says ErrKeyExists for a
// taken key however the server words it.
func (cl *claim) wait() (uint64, error) {
	cl.once.Do(func() {
		if cl.f != nil {
			select {
			case ack := <-cl.f.Ok():
				cl.rev = ack.Sequence
				return
			case <-cl.f.Err():
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		cl.rev, cl.err = cl.w.calls.Create(ctx, cl.key, cl.rec)
	})
	return cl.rev, cl.err
}
