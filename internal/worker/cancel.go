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

// canceller stops calls their agents cancel, wherever they are. A
// cancellation (toolgate.cancel.<agent>.<call id>, answered by one worker
// of the queue group) records the call's key in the cancels bucket, then
// looks where the call is. Every call this worker runs is registered
// before the bucket is read for it, and every worker watches the bucket:
// so either the call's own check sees the mark (a queued call is answered
// cancelled without running), or the watch does and cancels the running
// call's context (bash kills the command's whole process tree). A parked
// call is withdrawn from approval; the worker that parks a call checks the
// mark after parking, so a cancellation racing the park is not lost.
type canceller struct {
	w  *Worker
	kv jetstream.KeyValue

	mu sync.Mutex
	// running are the calls running here by call key; a key may have more
	// than one entry while a duplicate delivery is being turned away.
	running map[string]map[*runningCall]bool
	sem     chan struct{} // bounds requests handled at once
}

type runningCall struct {
	cancel context.CancelCauseFunc
}

func newCanceller(w *Worker) *canceller {
	return &canceller{w: w, running: map[string]map[*runningCall]bool{}, sem: make(chan struct{}, 64)}
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
		select {
		case cx.sem <- struct{}{}:
		default:
			cx.respond(m, events.CancelReply{Error: "busy: too many cancellations at once; try again"})
			return
		}
		go func() { defer func() { <-cx.sem }(); cx.serve(m) }()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("subscribe %s: %w", events.SubjectCancels, err)
	}
	return func() { _ = sub.Unsubscribe(); cancel() }, nil
}

// watch cancels the calls running here whose key is marked, re-opening
// the watch whenever it ends, until ctx does. ready is closed once the
// first watch is open.
func (cx *canceller) watch(ctx context.Context, ready chan struct{}) {
	var once sync.Once
	defer once.Do(func() { close(ready) })
	for ctx.Err() == nil {
		kw, err := cx.kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			cx.w.log.Debug("watch cancels", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		once.Do(func() { close(ready) })
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case e, ok := <-kw.Updates():
				if !ok {
					break loop
				}
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					cx.stopRunning(e.Key())
				}
			}
		}
		_ = kw.Stop()
	}
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

// marked reports whether key is marked cancelled. A bucket that cannot
// answer is logged and the call goes on: cancellation is the caller's
// wish, not a security boundary.
func (cx *canceller) marked(ctx context.Context, key string) bool {
	if cx.kv == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := cx.kv.Get(ctx, key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		cx.w.log.Warn("read cancels", "call_key", key, "err", err)
	}
	return err == nil
}

// wrap registers every call while it runs through h and answers a call
// marked cancelled before it runs: the mark is read in the background
// while the call is validated and judged, and awaited before the claim is
// taken (Start), or, for a call that ends before running (denied,
// parked), when it ends.
func (cx *canceller) wrap(h tools.Handler) tools.Handler {
	return tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
		key := CallKey(c.Agent, c.ID)
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		rc := &runningCall{cancel: cancel}
		cx.mu.Lock()
		if cx.running[key] == nil {
			cx.running[key] = map[*runningCall]bool{}
		}
		cx.running[key][rc] = true
		cx.mu.Unlock()
		defer func() {
			cx.mu.Lock()
			delete(cx.running[key], rc)
			if len(cx.running[key]) == 0 {
				delete(cx.running, key)
			}
			cx.mu.Unlock()
		}()
		got := make(chan bool, 1)
		go func() { got <- cx.marked(ctx, key) }()
		var once sync.Once
		var isMarked bool
		mark := func() bool { once.Do(func() { isMarked = <-got }); return isMarked }

		started := false
		if start := c.Start; start != nil {
			c.Start = func(sctx context.Context) error {
				if mark() {
					return cancelledError("before it ran")
				}
				if err := start(sctx); err != nil {
					return err
				}
				started = true
				return nil
			}
		} else if mark() {
			return nil, cancelledError("before it ran")
		} else {
			started = true
		}
		out, err := h.Handle(ctx, c)
		if !started && !errors.Is(err, tools.ErrCancelled) && mark() {
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
	if !cx.marked(ctx, CallKey(in.Agent, in.ID)) {
		return
	}
	if wd, ok := cx.w.cfg.Parker.(Withdrawer); ok {
		if _, err := wd.Withdraw(ctx, in.ID, in.Agent, "cancelled by the agent while it was being parked"); err != nil {
			cx.w.log.Warn("withdraw cancelled call", "call_id", in.ID, "err", err)
		}
	}
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
		cx.w.log.Warn("cancel", "call_id", id, "agent", agent, "err", err)
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
	e, err := w.calls.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.CancelReply{State: events.CancelQueued,
			Message: fmt.Sprintf("call %s has not started (or agent %s made no call with this id): the worker that takes it answers it cancelled without running it", id, agent)}, nil
	}
	if err != nil {
		return events.CancelReply{}, fmt.Errorf("read the call's record: %w", err)
	}
	var rec record
	_ = json.Unmarshal(e.Value(), &rec)
	if rec.State == stateDone {
		st := events.StatusError
		if rec.Result != nil {
			st = rec.Result.Status
		}
		return events.CancelReply{State: events.CancelFinished, Status: st,
			Message: fmt.Sprintf("call %s already finished with status %s; nothing to cancel", id, st)}, nil
	}
	if rec.Worker == w.cfg.Name {
		cx.stopRunning(key) // the watch does it too; sooner is better
	}
	return events.CancelReply{State: events.CancelRunning, Worker: rec.Worker,
		Message: fmt.Sprintf("call %s is running on worker %s: it is being stopped", id, rec.Worker)}, nil
}

func (cx *canceller) respond(m *nats.Msg, r events.CancelReply) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(r)
	if err := m.Respond(b); err != nil {
		cx.w.log.Debug("answer cancellation", "err", err)
	}
}
