package worker

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/events"
)

// A call over its agent's bounds (fair.go) waits out of the workers
// consumer, where the calls stream keeps message schedules: its copy
// (copyHeaders: the same call, HeaderRequeues counted, its Nats-Msg-Id
// named after its stream sequence) is stored on its own schedule subject
// (bus.CallWaitSubject: toolgate.call_wait.<agent>.<sequence>, which no
// consumer filters) as a one-time schedule whose target is the call's
// subject, and only then is the original acked. When its time comes the
// server stores the copy on the call's subject, at the tail of the
// queue, and removes the schedule; it is then delivered like any call.
//
// Nothing waiting holds a slot of the workers consumer's MaxAckPending,
// as a delayed nak does: a flood of any size past its agents' bounds
// leaves the server delivering other agents' calls.
//
// Exactly once holds as for a requeue (requeue.go): the schedule is
// stored (the stream's acknowledgement awaited) before the original is
// acked. A worker that dies in between leaves the original to be
// redelivered and the schedule to fire; the fired copy keeps
// HeaderRequeues (the server drops only Nats-Msg-Id and its Nats-Schedule*
// headers, and adds Nats-Scheduler), so it and the redelivered original
// are both claimed by call id and one of them runs. The redelivered
// original sent to wait again names the same schedule: within the
// stream's duplicate window (2 minutes) it is dropped as a duplicate;
// after it, it replaces the schedule still waiting (a schedule rolls up
// its subject) or, fired already, makes a second copy the claim answers.

// Bounds of a wait: overflowDelay the first time, overflowDelay more
// each time the call waited before, at most waitSteps times it.
const waitSteps = 5

// waitDelay is how long m waits out of the consumer: on average
// overflowDelay per time it waited (or was requeued) before, and this
// once, at most waitSteps × overflowDelay; drawn at random between half
// and one and a half times that, so that a flood's calls sent to wait
// together do not all fire together (each time, only as many as its
// agent may hold would stay, and the rest wait again: its calls would
// run a few per wait).
func waitDelay(m callMsg) time.Duration {
	n, _ := strconv.Atoi(m.Headers().Get(HeaderRequeues))
	d := overflowDelay * time.Duration(min(max(n, 0)+1, waitSteps))
	return d/2 + rand.N(d)
}

// waitCopy is m's copy waiting until at as a schedule of the calls
// stream, to fire onto m's subject.
func waitCopy(m callMsg, at time.Time) *nats.Msg {
	h := copyHeaders(m)
	h.Set(headerSchedule, "@at "+at.UTC().Format(time.RFC3339Nano))
	h.Set(headerScheduleTarget, m.Subject())
	agent, _, _ := events.ParseCallSubject(m.Subject())
	return &nats.Msg{Subject: bus.CallWaitSubject(agent, m.StreamSeq()), Header: h, Data: m.Data()}
}

// The headers of a message schedule (ADR-51).
const (
	headerSchedule       = "Nats-Schedule"
	headerScheduleTarget = "Nats-Schedule-Target"
)

// wait stores m's copy as a schedule firing after delay and returns the
// original's fate: acked once the stream has stored the schedule (or
// dropped it as one it has). When it cannot be stored m goes back to the
// stream with a nak delayed as long (which holds a slot of MaxAckPending
// meanwhile, and spends one of its deliveries).
func (w *Worker) wait(m callMsg, delay time.Duration) fate.Fate {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.publishTimeout)
	defer cancel()
	c := waitCopy(m, time.Now().Add(delay))
	if _, err := w.js.PublishMsg(ctx, c); err != nil {
		w.log.Warn("call over its agent's bounds: its wait not stored; sent back", "subject", m.Subject(), "stream_seq", m.StreamSeq(), "err", err)
		return fate.Retry(delay, err)
	}
	w.log.Debug("call over its agent's bounds waits", "subject", m.Subject(), "stream_seq", m.StreamSeq(), "schedule", c.Subject, "delay", delay)
	return fate.Ack()
}

// useSchedules reads whether the calls stream keeps calls over their
// agent's bounds as message schedules (bus.Schedules), and says once
// when it does not: such calls then wait as delayed naks, which count
// against the workers consumer's MaxAckPending.
func (w *Worker) useSchedules(ctx context.Context) {
	st, err := w.js.Stream(ctx, bus.StreamCalls)
	if err == nil && bus.Schedules(st.CachedInfo().Config) {
		w.schedules = true
		return
	}
	w.log.Warn("the calls stream keeps no message schedules (the server refused them): calls over their agent's bounds go back to the stream as delayed naks, which count against the workers consumer's MaxAckPending", "err", err)
}

// waitingCalls counts the calls waiting out their agent's bounds as
// schedules of the calls stream, read at most every waitingRead: the
// stream's messages that the workers consumer has neither pending nor
// delivered unacknowledged (every other message of the calls stream is
// one of those).
type waitingCalls struct {
	mu   sync.Mutex
	at   time.Time
	n    int64
	err  error
	read func(ctx context.Context) (int64, error)
}

// waitingRead bounds how often the waiting calls are counted.
const waitingRead = 10 * time.Second

func (w *Worker) newWaitingCalls() *waitingCalls {
	wc := &waitingCalls{}
	wc.read = func(ctx context.Context) (int64, error) {
		st, err := w.js.Stream(ctx, bus.StreamCalls)
		if err != nil {
			return 0, err
		}
		c, err := w.js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
		if err != nil {
			return 0, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, err
		}
		return max(int64(st.CachedInfo().State.Msgs)-int64(info.NumPending)-int64(info.NumAckPending), 0), nil
	}
	return wc
}

// count is the gauge's reading: false when the last read failed.
func (wc *waitingCalls) count(ctx context.Context) (int64, bool) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if time.Since(wc.at) >= waitingRead {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		wc.n, wc.err = wc.read(rctx)
		cancel()
		wc.at = time.Now()
	}
	return wc.n, wc.err == nil
}
