package client

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/events"
)

// resultsLinger is how long the client keeps its results subscription
// once no call waits: an agent's calls follow one another, and each
// subscribing and unsubscribing anew costs the client and the server
// work per call (the subscription, its shadow across the accounts).
const resultsLinger = 30 * time.Second

// results hands the results of the agent's calls to the calls waiting
// for them, from one subscription to the agent's results
// (toolgate.result.<agent>.*), made when a call first waits and removed
// resultsLinger after the last one stopped waiting. A result no call of
// this client waits for is dropped, as it was when nothing subscribed.
type results struct {
	nc     *nats.Conn
	prefix string // toolgate.result.<agent>.
	mu     sync.Mutex
	sub    *nats.Subscription
	idle   *time.Timer // removes sub when no call has waited for linger
	linger time.Duration
	// waiting are the channels of the calls waiting, by call id: more
	// than one when calls of one id wait at once.
	waiting map[string][]chan *nats.Msg
}

func newResults(nc *nats.Conn, agent string) *results {
	return &results{nc: nc, prefix: events.ResultSubject(agent, ""), linger: resultsLinger, waiting: map[string][]chan *nats.Msg{}}
}

// wait hands the results of call id to ch until the returned function is
// called.
func (r *results) wait(id string, ch chan *nats.Msg) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil {
		sub, err := r.nc.Subscribe(r.prefix+"*", r.deliver)
		if err != nil {
			return nil, fmt.Errorf("subscribe to results: %w", err)
		}
		r.sub = sub
	}
	if r.idle != nil {
		r.idle.Stop()
	}
	r.waiting[id] = append(r.waiting[id], ch)
	return func() { r.done(id, ch) }, nil
}

// done stops handing the results of call id to ch.
func (r *results) done(id string, ch chan *nats.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	chs := r.waiting[id]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(r.waiting, id)
	} else {
		r.waiting[id] = chs
	}
	if len(r.waiting) > 0 {
		return
	}
	if r.idle == nil {
		r.idle = time.AfterFunc(r.linger, r.unsubscribeIdle)
	} else {
		r.idle.Reset(r.linger)
	}
}

// unsubscribeIdle removes the subscription when no call waits.
func (r *results) unsubscribeIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.waiting) > 0 || r.sub == nil {
		return
	}
	_ = r.sub.Unsubscribe()
	r.sub = nil
}

// deliver hands a result to the calls waiting for it. A call's channel
// that is full drops it, as a subscription's full channel would: the
// call finds its stored result instead (storedResultCheck).
func (r *results) deliver(m *nats.Msg) {
	id, ok := strings.CutPrefix(m.Subject, r.prefix)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.waiting[id] {
		select {
		case ch <- m:
		default:
		}
	}
}
