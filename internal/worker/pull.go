package worker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
)

// nextSubject is the JetStream API subject a pull request for the workers
// consumer is published on.
const nextSubject = "$JS.API.CONSUMER.MSG.NEXT." + bus.StreamCalls + "." + bus.ConsumerWorkers

// pullExpiry is how long one pull request waits at the server for calls.
// The server answers an expired request with a 408 status; a request
// unanswered pullExpiry+pullGrace after it was sent is forgotten (the
// server that held it restarted). It also bounds how long a stopping
// worker keeps its subscription for the requests it left open (stop):
// an idle worker asks again every pullExpiry, which costs the server one
// request and one status.
// After a refused request the puller waits refusedPause before asking
// again.
const (
	pullExpiry   = 2 * time.Second
	pullGrace    = 5 * time.Second
	refusedPause = time.Second
)

// puller keeps the workers consumer asked for exactly as many calls as
// the pool has free slots, over one long-lived subscription:
//
//   - A pull request is sent as soon as slots free up, without waiting for
//     an earlier request to be filled, so taking the next call costs no
//     round trip of its own when the queue is not empty.
//   - Calls asked for plus calls running never exceed the concurrency: the
//     server delivers at most what was asked, and every call delivered goes
//     straight to a running slot. No call waits in a client buffer, so none
//     can outlive its ack wait unseen; a running call is kept alive by its
//     heartbeat.
//   - Each request has its own reply subject (the inbox, a dot, a request
//     number), so a request's 408 (expired) says exactly how many asked-for
//     calls will not come.
//   - A stopping worker asks for nothing more but keeps its subscription
//     until every request it left open at the server has ended, and hands
//     each call delivered meanwhile back with a nak delayed until those
//     requests have ended (so that it goes to another worker): no call
//     reaches a subscription that is gone and waits out its ack wait
//     (stop).
//
// Slots are goroutines that live while the worker runs and take one call
// after another, so a call does not start a goroutine (and grow its stack)
// of its own.
type puller struct {
	w     *Worker
	inbox string
	msgs  chan *nats.Msg
	wake  chan struct{}     // a slot freed
	work  chan deliveredMsg // hands a call to an idle slot
	quit  chan struct{}     // closed when the worker stops taking calls
	slots sync.WaitGroup
	fair  *fairShare // which agent's call takes a free slot (fair.go)

	asked int // calls asked for and not yet delivered
	reqs  map[string]*pullReq
	order []string // request ids, oldest first
	seq   uint64
	hold  time.Time // no request before this (the server refused one)
	// heldTurn: the stream had no call to run for a freed slot; a held
	// call takes it (ask).
	heldTurn bool
	// stopping: the worker stops; calls delivered now are handed back.
	stopping bool
}

type pullReq struct {
	n        int // calls still to come
	deadline time.Time
	probe    bool // the stream asked first for a slot: a request that does not wait (ask)
}

func newPuller(w *Worker) *puller {
	c := w.cfg.Concurrency
	return &puller{
		w: w, inbox: w.nc.NewInbox(),
		// At most c calls plus one status per request (at most c requests)
		// can be on their way: the channel never fills.
		msgs: make(chan *nats.Msg, 2*c+16),
		wake: make(chan struct{}, 1), work: make(chan deliveredMsg), quit: make(chan struct{}),
		reqs: map[string]*pullReq{},
		fair: newFairShare(w.cfg.AgentConcurrency, c, w.cfg.Bus.MaxDeliver, w.ackWait(), w.schedules),
	}
}

// run takes calls until ctx is done, then stops (stop). Calls handed to
// a slot before ctx was done still run (the shutdown grace covers them).
func (p *puller) run(ctx context.Context) error {
	sub, err := p.w.nc.ChanSubscribe(p.inbox+".*", p.msgs)
	if err != nil {
		return err
	}
	reconnected := p.w.nc.StatusChanged(nats.CONNECTED)
	defer p.w.nc.RemoveStatusListener(reconnected)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p.ask()
		select {
		case <-ctx.Done():
			p.stop(sub, reconnected)
			close(p.quit)
			return nil
		case m := <-p.msgs:
			p.receive(m)
		case <-p.wake:
		case <-reconnected:
			// The requests waiting at the server are gone with the
			// connection that sent them.
			p.forgetAll()
		case now := <-tick.C:
			p.fair.refresh(now)
			for id, r := range p.reqs {
				if now.After(r.deadline.Add(pullGrace)) {
					p.end(id, "") // its status never came
				}
			}
		}
	}
}

// stop ends taking calls without stranding any. The server delivers to a
// request until it is filled or expires, and a call delivered to a reply
// subject nobody listens on any more (a message on its way when the
// subscription went, or sent by a consumer leader on another server before
// it learnt the interest was gone) comes back only after the ack wait. So
// the puller asks for nothing more, keeps listening until each request it
// left open has ended (filled, or the server's 408 at its expiry: at most
// pullExpiry), hands back each call that arrives meanwhile with a nak
// delayed until those requests have ended (so that it goes to another
// worker, not to this one's next open request), and only then
// unsubscribes. A request whose status never comes (its server went away)
// is given up pullGrace after its expiry, as while running.
func (p *puller) stop(sub *nats.Subscription, reconnected <-chan nats.Status) {
	p.stopping = true
	// Calls held for their agent's turn go back first, for another
	// worker to take once this one's open requests have ended.
	if n := p.fair.handBack(p.handBackDelay(), p.handBack); n > 0 {
		p.w.log.Info("stopping: calls waiting for their agent's turn handed back", "calls", n)
	}
	giveUp := time.NewTimer(time.Until(p.lastDeadline().Add(pullGrace)))
	defer giveUp.Stop()
	for len(p.reqs) > 0 && !p.w.nc.IsClosed() {
		select {
		case m := <-p.msgs:
			p.receive(m)
		case <-reconnected:
			p.forgetAll() // the server holding them is gone
		case <-giveUp.C:
			p.w.log.Warn("stopping: pull requests unanswered; unsubscribing", "requests", len(p.reqs))
			p.forgetAll()
		}
	}
	_ = sub.Unsubscribe()
	for {
		select {
		case m := <-p.msgs:
			p.receive(m)
			continue
		default:
		}
		break
	}
	if n := p.w.handedBack.Load(); n > 0 {
		p.w.log.Info("stopping: calls delivered after the stop handed back", "calls", n)
	}
}

// handBackDelay is how long a call a stopping worker hands back waits at
// the server before it is delivered again: until the pull requests this
// worker left open have ended, and a little more. Handed back without a
// delay, the server gave it straight to another of those requests, and
// each such delivery counts: under load a call bounced through five of
// them and was dead-lettered without ever running.
func (p *puller) handBackDelay() time.Duration {
	if d := time.Until(p.lastDeadline()); d > 0 {
		return d + handBackMargin
	}
	return 0
}

// lastDeadline is when the last pull request left open at the server
// expires; zero when none is open.
func (p *puller) lastDeadline() time.Time {
	var last time.Time
	for _, r := range p.reqs {
		if r.deadline.After(last) {
			last = r.deadline
		}
	}
	return last
}

// handBackMargin is added to a hand-back's delay so that the redelivery
// comes after the server has ended the requests.
const handBackMargin = 100 * time.Millisecond

// ask gives free slots to held calls whose agent's turn it is (fair.go),
// the stream first (below), then sends a pull request for the free slots
// not yet asked for, however many calls are held (a call that cannot be held goes back
// to the stream or to its tail: fairShare.overflow). While earlier requests still wait
// at the server it waits until a batch's worth of slots is free, so that
// a busy worker does not send a request per call.
//
// A freed slot that a held call could take goes to the stream first:
// the puller asks it for one call with a request that does not wait at
// the server. A call that runs takes the slot; a call held or sent back
// does not, and the stream is asked again; when the server answers that
// it has nothing (heldTurn), the held call takes the slot. So a call of
// an agent that holds none, queued behind held calls, waits for one
// call's run, not for the held calls to drain; a held call waits at most
// until every agent below its cap queued behind it has had a slot. No
// such request is sent while one of ours waits at the server: that one
// gets the stream's next call.
func (p *puller) ask() {
	c := p.w.cfg.Concurrency
	for c-int(p.w.running.Load())-p.asked > 0 {
		if !p.heldTurn && p.asked == 0 && !time.Now().Before(p.hold) && p.fair.waiting() {
			if p.request(1, true) {
				return
			}
			p.heldTurn = true // disconnected: the held call takes the slot
		}
		m, ok := p.fair.next()
		if !ok {
			break
		}
		p.dispatch(m)
		p.heldTurn = false
	}
	free := c - int(p.w.running.Load()) - p.asked
	if free <= 0 || (p.asked > 0 && free < max(1, c/8)) || time.Now().Before(p.hold) {
		return
	}
	p.request(free, false)
}

// request asks the server for n calls, waiting there up to pullExpiry for
// them, or (probe) not waiting: the server then answers at once that it
// has none. It reports whether the request was sent.
func (p *puller) request(n int, probe bool) bool {
	p.seq++
	id := strconv.FormatUint(p.seq, 36)
	req := `{"batch":` + strconv.Itoa(n) + `,"expires":` + strconv.FormatInt(pullExpiry.Nanoseconds(), 10) + `}`
	if probe {
		req = `{"batch":` + strconv.Itoa(n) + `,"no_wait":true}`
	}
	if err := p.w.nc.PublishRequest(nextSubject, p.inbox+"."+id, []byte(req)); err != nil {
		return false // disconnected: asked again on the next tick or reconnect
	}
	p.reqs[id] = &pullReq{n: n, deadline: time.Now().Add(pullExpiry), probe: probe}
	p.order = append(p.order, id)
	p.asked += n
	return true
}

// forgetAll forgets every request: the server holding them is gone.
func (p *puller) forgetAll() {
	clear(p.reqs)
	p.order = p.order[:0]
	p.asked = 0
	p.heldTurn = true
}

// receive accounts for a message on the inbox: a call goes to a slot, a
// status ends a request.
func (p *puller) receive(m *nats.Msg) {
	if m.Reply == "" {
		// Not a call (a delivered call always has its ack subject as the
		// reply, and its own subject): a status ending the request whose
		// reply subject it came on.
		id := m.Subject[min(len(m.Subject), len(p.inbox)+1):]
		switch status := m.Header.Get("Status"); status {
		case "100": // an idle heartbeat; none are asked for
			return
		case "404", "408": // nothing to deliver, or expired
		default:
			// 409: leadership change, consumer deleted, too many waiting;
			// 503: no JetStream or no such consumer. Ask again after a
			// pause, not at once: the next request would meet the same.
			p.w.log.Warn("pull request refused; asking again in a second", "status", status, "description", m.Header.Get("Description"))
			p.hold = time.Now().Add(refusedPause)
		}
		p.end(id, m.Header.Get(pendingMsgsHeader))
		return
	}
	// Calls come on their own subject, not the request's: count them
	// against the oldest request (the server fills requests in order).
	// The count that matters, asked, is exact either way: a request's
	// status says how many of it never came.
	p.asked = max(p.asked-1, 0)
	for len(p.order) > 0 {
		r := p.reqs[p.order[0]]
		if r == nil || r.n <= 0 {
			p.order = p.order[1:]
			continue
		}
		if r.n--; r.n == 0 {
			delete(p.reqs, p.order[0])
			p.order = p.order[1:]
		}
		break
	}
	d := delivery{m: m, nc: p.w.nc, wait: p.w.cfg.publishTimeout}
	if !p.stopping { // stopping: dispatch hands it back
		// Its agent holds its bound of calls, or the pool is full: it
		// waits as a schedule of the stream, or goes back to the stream
		// (with no delivery to spare, to its tail), and the puller keeps
		// taking other agents' calls.
		switch act, delay, bound := p.fair.overflow(d); act {
		case wait:
			p.w.agentRefused(bound)
			p.away(d, func(m callMsg) fate.Fate { return p.w.wait(m, delay) })
			return
		case sendBack:
			p.w.agentRefused(bound)
			p.handBack(d, fate.Retry(delay, nil))
			return
		case requeue:
			p.w.agentRefused(bound)
			p.w.agentRefused(boundRequeued)
			p.away(d, p.w.requeue)
			return
		}
		if !p.fair.admit(d) {
			return
		}
		p.heldTurn = false // the stream has calls to run again
	}
	p.dispatch(d)
}

// pendingMsgsHeader is where the server's status ending a pull request
// says how many of the calls asked for it never delivered.
const pendingMsgsHeader = "Nats-Pending-Messages"

// end forgets a request the server ended; pending is its header's count of
// calls not delivered ("" when absent: our own count is used).
func (p *puller) end(id, pending string) {
	r := p.reqs[id]
	n := 0
	if v, err := strconv.Atoi(pending); err == nil {
		n = v
	} else if r != nil {
		n = r.n
	}
	p.asked = max(p.asked-n, 0)
	if r != nil && r.probe {
		p.heldTurn = true // the stream had no call to run
	}
	delete(p.reqs, id)
	for len(p.order) > 0 && p.reqs[p.order[0]] == nil {
		p.order = p.order[1:]
	}
}

// dispatch hands a call to an idle slot or starts a slot for it; a
// stopping worker hands it back to the server instead, to be delivered
// again once the pull requests it left open have ended (handBackDelay).
func (p *puller) dispatch(m deliveredMsg) {
	if p.stopping {
		p.w.log.Debug("stopping: call handed back", "subject", m.Subject(), "stream_seq", m.StreamSeq(), "delivered", m.NumDelivered())
		p.w.handedBack.Add(1)
		p.handBack(m, fate.Retry(p.handBackDelay(), nil))
		return
	}
	p.w.running.Add(1)
	p.w.inflight.Add(1)
	select {
	case p.work <- m:
	default:
		p.slots.Add(1)
		go p.slot(m)
	}
}

// handBack settles a call handed back (by a stopping worker, or over its
// agent's bound of held calls) without holding up the puller's loop while
// the server confirms it (delivery.NakWithDelay); the worker's run waits
// for it as for a slot.
func (p *puller) handBack(m deliveredMsg, f fate.Fate) {
	p.slots.Add(1)
	go func() {
		defer p.slots.Done()
		p.w.settle(m, f)
	}()
}

// slot handles calls one after another until the worker stops.
func (p *puller) slot(m deliveredMsg) {
	defer p.slots.Done()
	for {
		p.w.settle(m, p.w.handle(m))
		p.fair.release(callAgent(m))
		p.w.running.Add(-1)
		p.w.inflight.Done()
		select {
		case p.wake <- struct{}{}:
		default:
		}
		select {
		case m = <-p.work:
		case <-p.quit:
			return
		}
	}
}

// callMsg is a delivered call message as the call handler sees it: what
// it reads, and InProgress to keep it alive while the call runs (the
// heartbeat, a claim waiting out an election). It cannot settle the
// message: handle returns a fate and settle applies it.
type callMsg interface {
	Subject() string
	Headers() nats.Header
	Data() []byte
	InProgress() error
	// StreamSeq is the message's sequence in the calls stream (0 when
	// unknown).
	StreamSeq() uint64
	// NumDelivered is how many times the message was delivered (0 when
	// unknown).
	NumDelivered() uint64
}

// deliveredMsg is a call message as the puller holds it: readable, and
// settled by its fate.
type deliveredMsg interface {
	callMsg
	fate.Settler
}

// delivery is a call message delivered to the puller's inbox.
type delivery struct {
	m    *nats.Msg
	nc   *nats.Conn    // for a hand-back the server confirms; nil: fire and forget
	wait time.Duration // how long a confirmation is awaited
}

func (d delivery) Subject() string      { return d.m.Subject }
func (d delivery) Headers() nats.Header { return d.m.Header }
func (d delivery) Data() []byte         { return d.m.Data }
func (d delivery) Ack() error           { return d.m.Ack() }
func (d delivery) InProgress() error    { return d.m.InProgress() }

// NakWithDelay hands the call back to be delivered again after t, and
// waits for the consumer's leader to confirm it, asking again while no
// leader answers (an election after its server died): a hand-back sent
// to a leader that died before it applied it was lost, and the call then
// waited a whole ack wait in the queue. An ack needs no such care: a lost
// one makes a redelivery the stored result answers, which no agent waits
// for.
func (d delivery) NakWithDelay(t time.Duration) error {
	if d.nc == nil {
		return d.m.NakWithDelay(t)
	}
	until := time.Now().Add(t)
	var err error
	for attempt, gap := 0, 250*time.Millisecond; attempt < handBackAttempts; attempt, gap = attempt+1, min(2*gap, 2*time.Second) {
		body := []byte(`-NAK {"delay": ` + strconv.FormatInt(max(time.Until(until), 0).Nanoseconds(), 10) + `}`)
		if _, err = d.nc.Request(d.m.Reply, body, d.wait); err == nil || d.nc.IsClosed() {
			return err
		}
		time.Sleep(gap)
	}
	return err
}

// handBackAttempts bounds the asks of a hand-back (some 30 s with their
// waits: a cluster elects a consumer leader within seconds).
const handBackAttempts = 6

func (d delivery) TermWithReason(reason string) error {
	return d.m.Respond([]byte("+TERM " + reason))
}

func (d delivery) StreamSeq() uint64 {
	if md, err := d.m.Metadata(); err == nil {
		return md.Sequence.Stream
	}
	return 0
}

func (d delivery) NumDelivered() uint64 {
	if md, err := d.m.Metadata(); err == nil {
		return md.NumDelivered
	}
	return 0
}

// jsMsg adapts a message of the jetstream package (a fetch, a consumer)
// to callMsg.
type jsMsg struct{ jetstream.Msg }

func (m jsMsg) StreamSeq() uint64 {
	if md, err := m.Metadata(); err == nil {
		return md.Sequence.Stream
	}
	return 0
}

func (m jsMsg) NumDelivered() uint64 {
	if md, err := m.Metadata(); err == nil {
		return md.NumDelivered
	}
	return 0
}
