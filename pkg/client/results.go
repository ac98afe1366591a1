package client

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/events"
)

// resultMux is a client's one subscription to its agent's results,
// toolgate.result.<agent>.*, held while calls wait for theirs: each
// result goes to the calls waiting on its id. One subscription per call
// cost the cluster an interest change per call and its undoing, each
// sent to every other node in two accounts (the agents' and the
// toolgate account's import of it); with one subscription, calls
// waiting together share it. It is made when the first call starts to
// wait, before the call is published, as a call's own was, and removed
// resultsLinger after the last one stopped waiting: an agent's calls
// follow one another, and subscribing anew for each would cost the
// client and the servers that work per call again.
type resultMux struct {
	mu      sync.Mutex
	sub     *nats.Subscription
	idle    *time.Timer                 // removes sub once no call waited for linger
	linger  time.Duration               // 0: resultsLinger
	prefix  string                      // toolgate.result.<agent>.
	waiting map[string][]chan *nats.Msg // by call id
	lost    int                         // results a waiting call's full buffer could not take
}

// wait registers ch for the results of call id, subscribing first when
// no call waits, and returns the function that unregisters it.
func (m *resultMux) wait(nc *nats.Conn, agent, id string, ch chan *nats.Msg) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub == nil {
		m.prefix = events.ResultSubject(agent, "")
		sub, err := nc.Subscribe(m.prefix+"*", m.deliver)
		if err != nil {
			return nil, fmt.Errorf("subscribe to results: %w", err)
		}
		// The connection's default pending limits bound what a flood on
		// these subjects can hold; what they drop, dropped counts, and
		// the waiting calls look up their stored results.
		m.sub = sub
		m.waiting = map[string][]chan *nats.Msg{}
	}
	if m.idle != nil {
		m.idle.Stop()
	}
	m.waiting[id] = append(m.waiting[id], ch)
	return func() { m.stop(id, ch) }, nil
}

// resultsLinger is how long a client keeps its results subscription once
// no call waits.
const resultsLinger = 30 * time.Second

// stop unregisters ch from id's results, and unsubscribes once no call
// has waited for the linger.
func (m *resultMux) stop(id string, ch chan *nats.Msg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	chs := m.waiting[id]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(m.waiting, id)
	} else {
		m.waiting[id] = chs
	}
	if len(m.waiting) > 0 || m.sub == nil {
		return
	}
	linger := m.linger
	if linger <= 0 {
		linger = resultsLinger
	}
	if m.idle == nil {
		m.idle = time.AfterFunc(linger, m.unsubscribeIdle)
	} else {
		m.idle.Reset(linger)
	}
}

// unsubscribeIdle removes the subscription when no call waits.
func (m *resultMux) unsubscribeIdle() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiting) > 0 || m.sub == nil {
		return
	}
	_ = m.sub.Unsubscribe()
	m.sub = nil
}

// deliver hands a result to the calls waiting on its id; a result no
// call waits for (another process's of the same agent, a late copy) is
// dropped.
func (m *resultMux) deliver(msg *nats.Msg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := strings.CutPrefix(msg.Subject, m.prefix)
	if !ok {
		return
	}
	for _, ch := range m.waiting[id] {
		select {
		case ch <- msg:
		default:
			m.lost++
		}
	}
}

// dropped is how many results were lost so far: by the subscription
// (the connection's slow-consumer limit) or for a full buffer.
func (m *resultMux) dropped() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lost
	if m.sub != nil {
		if d, err := m.sub.Dropped(); err == nil {
			n += d
		}
	}
	return n
}
