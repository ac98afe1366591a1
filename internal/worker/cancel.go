package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/parking"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Withdrawer is what a Parker may also do: withdraw a parked call its
// agent cancelled. It returns approval.Cancelled when it withdrew the
// call, the final status the call already had otherwise, and an error
// wrapping parking.ErrNotFound when no call of agent is parked under id.
type Withdrawer interface {
	Withdraw(ctx context.Context, callID, agent, reason string) (papproval.Status, error)
}

// Withdraw withdraws a parked call its agent cancelled.
func (mp ManagerParker) Withdraw(ctx context.Context, callID, agent, reason string) (papproval.Status, error) {
	return mp.M.Withdraw(ctx, callID, agent, reason)
}

var _ Withdrawer = ManagerParker{}

// cancelMark is what the cancels bucket holds under a cancelled call's
// key.
type cancelMark struct {
	Agent  string    `json:"agent"`
	CallID string    `json:"call_id"`
	Worker string    `json:"worker"` // the worker that recorded it
	At     time.Time `json:"at"`
}

// stateCancelled is the calls-bucket record of a call cancelled before
// any worker claimed it: the claim of the worker that takes it fails, and
// that worker answers it cancelled (cancelledDuplicate).
const stateCancelled = "cancelled"

// canceller stops calls their agents cancel, wherever they are. A
// cancellation (toolgate.cancel.<agent>.<call id>, answered by one worker
// of the queue group) records a mark under the call's key in the cancels
// bucket, withdraws a parked call, and then creates the call's record in
// the calls bucket with state cancelled: when that succeeds, no worker had
// claimed the call, and the claim of the one that takes it will fail, so
// it answers the call cancelled without running it. Every worker watches
// the cancels bucket (all of it, then its changes) into a local set, and
// registers every call before looking the set up: so a call claimed
// before the cancellation either finds the mark when it is registered or
// is registered when the mark arrives, and its context is cancelled (bash
// kills the command's whole process tree). No call waits on the bucket:
// the look-up is local. A worker that parks a call looks the set up after
// parking, so a cancellation racing the park is not lost.
type canceller struct {
	w  *Worker
	kv jetstream.KeyValue

	mu sync.Mutex
	// running are the calls running here by call key; a key may have more
	// than one entry while a duplicate delivery is being turned away.
	running map[string]map[*runningCall]bool
	// marks are the call keys marked cancelled, as the watch has seen
	// them, with when they were seen; entries past the bucket's TTL go.
	marks map[string]time.Time
	// pool bounds the requests handled at once, in all and per agent.
	pool *agentPool
	// queue indexes each agent's queued calls (queued).
	queue map[string]*queuedIndex
	// madeUp are, per agent, when this worker recorded its cancellations
	// of ids it had no call under, for markTTL (madeUpCancelsPerAgent).
	madeUp map[string][]time.Time
}

type runningCall struct {
	cancel context.CancelCauseFunc
}

func newCanceller(w *Worker) *canceller {
	return &canceller{w: w, running: map[string]map[*runningCall]bool{}, marks: map[string]time.Time{},
		pool:  newAgentPool("cancels", cancelConcurrency, cancelPerAgent),
		queue: map[string]*queuedIndex{}, madeUp: map[string][]time.Time{}}
}

// cancelledError is the error of a call its agent cancelled.
func cancelledError(where string) error {
	return fmt.Errorf("%w %s", tools.ErrCancelled, where)
}

// start opens the cancels bucket, watches it and answers cancellation
// requests until ctx ends; stop ends the subscription.
func (cx *canceller) start(ctx context.Context) (stop func(), err error) {
	if cx.kv, err = cx.w.js.KeyValue(ctx, bus.BucketCancels); err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bus.BucketCancels, err)
	}
	ready := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	go cx.watch(wctx, ready)
	select {
	case <-ready:
	case <-ctx.Done():
	}
	sub, err := cx.w.nc.QueueSubscribe(events.SubjectCancels, "workers", func(m *nats.Msg) {
		// One agent's cancellations past its bound are refused at once,
		// never queued before another agent's; the wait for a place in
		// the shared pool is off the subscription.
		agent := cancelAgent(m.Subject)
		if !cx.pool.take(agent) {
			cx.w.agentRefused(cx.pool.name)
			msg := fmt.Sprintf("agent %s has %d cancellations in service already (its per-agent bound); ask again once one is answered", agent, cancelPerAgent)
			if m.Reply == "" {
				cx.w.log.Warn("cancellation dropped", "subject", m.Subject, "why", msg)
			}
			cx.respond(m, events.CancelReply{Agent: agent, Error: msg, Message: msg})
			return
		}
		go func() {
			cx.pool.sem <- struct{}{}
			defer func() { <-cx.pool.sem; cx.pool.give(agent) }()
			cx.serve(m)
		}()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("subscribe %s: %w", events.SubjectCancels, err)
	}
	return func() { _ = sub.Unsubscribe(); cancel() }, nil
}

// watch keeps the set of marked keys and cancels the calls running here
// whose key is marked, re-opening the watch whenever it ends, until ctx
// does. ready is closed once the first watch has delivered the marks
// already in the bucket.
func (cx *canceller) watch(ctx context.Context, ready chan struct{}) {
	var once sync.Once
	defer once.Do(func() { close(ready) })
	bus.WatchKV(ctx, cx.kv, jetstream.AllKeys, cx.w.log, func(e jetstream.KeyValueEntry) {
		if e == nil { // the marks already stored are all in
			once.Do(func() { close(ready) })
			return
		}
		if e.Operation() == jetstream.KeyValuePut {
			cx.mark(e.Key())
			cx.stopRunning(e.Key())
		}
	})
}

// stopRunning cancels the call of key if it runs here.
func (cx *canceller) stopRunning(key string) bool {
	cx.mu.Lock()
	var rcs []*runningCall
	for rc := range cx.running[key] {
		rcs = append(rcs, rc)
	}
	cx.mu.Unlock()
	if len(rcs) == 0 {
		return false
	}
	cx.w.log.Info("cancelling running call", "call_key", key)
	for _, rc := range rcs {
		rc.cancel(cancelledError("while it ran"))
	}
	return true
}

// markTTL is how long a mark is kept in the local set: the cancels
// bucket's TTL (bus.Config.CallRecordTTL's default).
const markTTL = 24 * time.Hour

// mark adds key to the set of marked keys.
func (cx *canceller) mark(key string) {
	now := time.Now()
	cx.mu.Lock()
	defer cx.mu.Unlock()
	cx.marks[key] = now
	if len(cx.marks)%1024 == 0 {
		for k, t := range cx.marks {
			if now.Sub(t) > markTTL {
				delete(cx.marks, k)
			}
		}
	}
}

// marked reports whether key is marked cancelled, as far as the watch has
// seen.
func (cx *canceller) marked(key string) bool {
	cx.mu.Lock()
	defer cx.mu.Unlock()
	_, ok := cx.marks[key]
	return ok
}

// register adds rc to the calls running under key and reports whether
// key is marked cancelled, under one lock: a mark the watch adds later
// finds rc registered (watch marks, then stops the running calls).
func (cx *canceller) register(key string, rc *runningCall) (marked bool) {
	cx.mu.Lock()
	defer cx.mu.Unlock()
	if cx.running[key] == nil {
		cx.running[key] = map[*runningCall]bool{}
	}
	cx.running[key][rc] = true
	_, marked = cx.marks[key]
	return marked
}

// unregister removes rc from the calls running under key.
func (cx *canceller) unregister(key string, rc *runningCall) {
	cx.mu.Lock()
	defer cx.mu.Unlock()
	delete(cx.running[key], rc)
	if len(cx.running[key]) == 0 {
		delete(cx.running, key)
	}
}

// wrap registers every call while it runs through h, and answers a call
// marked cancelled before it runs: when it comes, before its claim is
// taken (Start), and, for a call that ends before running (denied,
// parked), when it ends.
func (cx *canceller) wrap(h tools.Handler) tools.Handler {
	return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
		key := CallKey(c.Agent, c.ID)
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		rc := &runningCall{cancel: cancel}
		marked := cx.register(key, rc)
		defer cx.unregister(key, rc)
		if marked {
			return nil, cancelledError("before it ran")
		}
		started := c.Start == nil // a resumed call: it runs now
		if start := c.Start; start != nil {
			c.Start = func(sctx context.Context) error {
				if cx.marked(key) {
					return cancelledError("before it ran")
				}
				if err := start(sctx); err != nil {
					return err
				}
				started = true
				return nil
			}
		}
		out, err := h.Handle(ctx, c)
		if !started && !errors.Is(err, tools.ErrCancelled) && cx.marked(key) {
			// Refused or parked before it ran: the cancellation wins, and
			// nothing is parked.
			return nil, cancelledError("before it ran")
		}
		if err != nil && !errors.Is(err, tools.ErrCancelled) && errors.Is(context.Cause(ctx), tools.ErrCancelled) {
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		return out, err
	})
}

// afterPark withdraws a call just parked when its cancellation came
// while it was being parked.
func (cx *canceller) afterPark(ctx context.Context, in *events.Call) {
	if !cx.marked(CallKey(in.Agent, in.ID)) {
		return
	}
	if wd, ok := cx.w.cfg.Parker.(Withdrawer); ok {
		if _, err := wd.Withdraw(ctx, in.ID, in.Agent, "cancelled by the agent while it was being parked"); err != nil {
			cx.w.log.Warn("withdraw cancelled call", "call_id", in.ID, "err", err)
		}
	}
}

// Bounds of the cancellation service: requests handled at once, in all
// and per agent, and the cancellations of ids an agent has no call under
// (each leaves a mark and a call record for 24 hours) one worker records
// per agent within that time.
const (
	cancelConcurrency     = 64
	cancelPerAgent        = 8
	madeUpCancelsPerAgent = 256
)

// ErrMadeUpCancels is the error of a cancellation refused because its
// agent has recorded as many cancellations of unknown ids as it may.
var ErrMadeUpCancels = errors.New("per-agent bound of cancellations of unknown calls reached")

// madeUpQuota refuses, without recording anything, a cancellation of an
// id agent has no call under (no record, not queued) once agent has
// madeUpCancelsPerAgent such cancellations recorded here.
func (cx *canceller) madeUpQuota(ctx context.Context, agent, id string) error {
	cx.mu.Lock()
	now, kept := time.Now(), cx.madeUp[agent][:0]
	for _, t := range cx.madeUp[agent] {
		if now.Sub(t) < markTTL {
			kept = append(kept, t)
		}
	}
	cx.madeUp[agent] = kept
	n := len(kept)
	cx.mu.Unlock()
	if n < madeUpCancelsPerAgent {
		return nil
	}
	if _, err := cx.w.calls.Get(ctx, CallKey(agent, id)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // it has a record (claimed, parked, done), or the look-up failed: not made up
	}
	if known, err := cx.queued(ctx, agent, id); err != nil || known {
		return nil
	}
	cx.w.agentRefused(boundMadeUpCancels)
	return fmt.Errorf("agent %s has no call %s, and %d cancellations of unknown calls recorded in the last 24 hours: %w; the cancellation is not recorded",
		agent, id, madeUpCancelsPerAgent, ErrMadeUpCancels)
}

// recordMadeUp counts a cancellation of an id agent had no call under.
func (cx *canceller) recordMadeUp(agent string) {
	cx.mu.Lock()
	defer cx.mu.Unlock()
	cx.madeUp[agent] = append(cx.madeUp[agent], time.Now())
}

// boundMadeUpCancels is the bound label of cancellations refused by
// madeUpQuota.
const boundMadeUpCancels = "made_up_cancels"

// cancelAgent is the agent token of toolgate.cancel.<agent>.<call id>.
func cancelAgent(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) < 3 {
		return ""
	}
	return parts[2]
}

// serve handles one cancellation request: toolgate.cancel.<agent>.<call id>.
func (cx *canceller) serve(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 4 || events.ValidToken(parts[2]) != nil || events.ValidToken(parts[3]) != nil {
		cx.respond(m, events.CancelReply{Error: fmt.Sprintf("subject %q is not toolgate.cancel.<agent>.<call id>", m.Subject)})
		return
	}
	agent, id := parts[2], parts[3]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := cx.cancel(ctx, agent, id)
	if err != nil {
		if !errors.Is(err, ErrMadeUpCancels) { // counted, not logged: a flood would flood the log
			cx.w.log.Warn("cancel", "call_id", id, "agent", agent, "err", err)
		}
		r.Error = err.Error()
		if r.Message == "" {
			r.Message = "could not cancel call " + id + ": " + err.Error()
		}
	}
	r.CallID, r.Agent = id, agent
	cx.respond(m, r)
}

// cancel records the cancellation of agent's call id and says where the
// call was.
func (cx *canceller) cancel(ctx context.Context, agent, id string) (events.CancelReply, error) {
	w := cx.w
	key := CallKey(agent, id)
	in := &events.Call{ID: id, Agent: agent}
	if res, ok := w.storedResult(ctx, in); ok && res.Status.Final() {
		return events.CancelReply{State: events.CancelFinished, Status: res.Status,
			Message: fmt.Sprintf("call %s already finished with status %s; nothing to cancel", id, res.Status)}, nil
	}
	if err := cx.madeUpQuota(ctx, agent, id); err != nil {
		return events.CancelReply{}, err
	}
	val, _ := json.Marshal(cancelMark{Agent: agent, CallID: id, Worker: w.cfg.Name, At: time.Now().UTC()})
	if _, err := cx.kv.Put(ctx, key, val); err != nil {
		return events.CancelReply{}, fmt.Errorf("record the cancellation: %w", err)
	}
	w.log.Info("call cancelled by its agent", "call_id", id, "agent", agent)
	if wd, ok := w.cfg.Parker.(Withdrawer); ok {
		st, err := wd.Withdraw(ctx, id, agent, "cancelled by the agent")
		switch {
		case err == nil && st == papproval.Cancelled:
			return events.CancelReply{State: events.CancelParked,
				Message: fmt.Sprintf("call %s was waiting for approval: the request is withdrawn and the call answered cancelled", id)}, nil
		case err != nil && !errors.Is(err, parking.ErrNotFound):
			return events.CancelReply{}, fmt.Errorf("withdraw the parked call: %w", err)
		}
	}
	now := time.Now().UTC()
	rec, _ := json.Marshal(record{State: stateCancelled, Worker: w.cfg.Name, Started: now, Heartbeat: now})
	if _, err := w.calls.Create(ctx, key, rec); err == nil {
		if known, err := cx.queued(ctx, agent, id); err == nil && !known {
			cx.recordMadeUp(agent)
			return events.CancelReply{State: events.CancelUnknown,
				Message: fmt.Sprintf("agent %s has no call %s queued, parked, running or finished: is the id right? (a call published later with this id is answered cancelled)", agent, id)}, nil
		}
		return events.CancelReply{State: events.CancelQueued,
			Message: fmt.Sprintf("call %s has not started (or agent %s made no call with this id): the worker that takes it answers it cancelled without running it", id, agent)}, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return events.CancelReply{}, fmt.Errorf("record the cancellation in the call's record: %w", err)
	}
	e, err := w.calls.Get(ctx, key)
	if err != nil {
		return events.CancelReply{}, fmt.Errorf("read the call's record: %w", err)
	}
	var cur record
	_ = json.Unmarshal(e.Value(), &cur)
	switch cur.State {
	case stateCancelled:
		return events.CancelReply{State: events.CancelQueued,
			Message: fmt.Sprintf("call %s was cancelled before: the worker that takes it answers it cancelled without running it", id)}, nil
	case stateDone:
		st := events.StatusError
		if cur.Result != nil {
			st = cur.Result.Status
		}
		return events.CancelReply{State: events.CancelFinished, Status: st,
			Message: fmt.Sprintf("call %s already finished with status %s; nothing to cancel", id, st)}, nil
	}
	if cur.Worker == w.cfg.Name {
		cx.stopRunning(key) // the watch does it too; sooner is better
	}
	return events.CancelReply{State: events.CancelRunning, Worker: cur.Worker,
		Message: fmt.Sprintf("call %s is running on worker %s: it is being stopped", id, cur.Worker)}, nil
}

func (cx *canceller) respond(m *nats.Msg, r events.CancelReply) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(r)
	if err := bus.Respond(m, &nats.Msg{Data: b}); err != nil {
		cx.w.log.Debug("answer cancellation", "err", err)
	}
}

// cancelledDuplicate answers a call whose claim failed because it was
// cancelled before any worker claimed it (its record says cancelled): the
// cancelled result, published once for all its deliveries.
func (w *Worker) cancelledDuplicate(in *events.Call) events.ResultData {
	res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: in.Tool, SessionID: in.Data.SessionID,
		Status: events.StatusCancelled, IsError: true, Output: cancelledError("before it ran").Error()}
	w.log.Info("call cancelled before it ran", "call_id", in.ID, "agent", in.Agent)
	return res
}

// queuedIndexLimit bounds how many of an agent's queued call ids the
// index keeps; past it a call not in the index is taken to be queued.
const queuedIndexLimit = 10000

// queuedIndex is what a worker knows of one agent's calls in the calls
// stream: the scoped message ids read so far, by stream sequence, and the
// sequence to read from next. A cancellation reads only the agent's calls
// queued since the last one (none, for a flood of made-up ids), never the
// whole queue again.
type queuedIndex struct {
	mu   sync.Mutex
	next uint64            // the first sequence not read yet
	ids  map[string]uint64 // scoped message id → sequence
}

// queued reports whether agent's call id waits in the calls stream, from
// the agent's index, brought up to date by reading the agent's calls
// queued since (by subject, without consuming them).
func (cx *canceller) queued(ctx context.Context, agent, id string) (bool, error) {
	cx.mu.Lock()
	ix := cx.queue[agent]
	if ix == nil {
		ix = &queuedIndex{next: 1, ids: map[string]uint64{}}
		cx.queue[agent] = ix
	}
	cx.mu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	st, err := cx.w.js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		return false, err
	}
	first := st.CachedInfo().State.FirstSeq
	for mid, seq := range ix.ids {
		if seq < first { // acknowledged and gone
			delete(ix.ids, mid)
		}
	}
	subject := bus.CallsOf(agent) // queued, and waiting out its bounds
	for len(ix.ids) < queuedIndexLimit {
		m, err := st.GetMsg(ctx, max(ix.next, first), jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return false, err
		}
		ix.ids[queuedID(m.Header)] = m.Sequence // a copy (requeued, waiting, fired) under its original's id
		ix.next = m.Sequence + 1
	}
	if _, ok := ix.ids[ScopedMsgID(agent, id)]; ok {
		return true, nil
	}
	_, ok := ix.ids[id]
	return ok || len(ix.ids) >= queuedIndexLimit, nil
}
