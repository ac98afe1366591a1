package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
)

// DefaultMaxQueuedCalls is Config.MaxQueuedCalls's default: with calls
// of at most the payload limit (1 MiB by default), about 1 GiB of the
// calls stream per agent, an eighth of the toolgate account's JetStream
// storage (identity.DefaultJetStreamLimits), like TaskAnswersPerAgent.
const DefaultMaxQueuedCalls = 1024

// ErrQueuedCallsQuota is the error of a call refused by the intake
// because its agent has its quota of calls queued (Config.MaxQueuedCalls).
var ErrQueuedCallsQuota = errors.New("per-agent quota of queued calls reached")

// boundQueuedCalls is the bound label of calls refused by queuedQuota.
const boundQueuedCalls = "queued_calls"

// Counting schedule of queuedQuota.
const (
	// queuedStepMax is the most calls of one agent a worker's intake
	// forwards between two counts of the agent's queue.
	queuedStepMax = 256
	// queuedRecount is how often, at most, the queue of an agent over its
	// quota is counted again (its calls are refused in between).
	queuedRecount = time.Second
	// queuedCountWait bounds one count.
	queuedCountWait = 2 * time.Second
	// queuedIdle is how long an agent the intake has no call of is kept
	// (between one and two of it): its next call is counted first.
	queuedIdle = time.Minute
	// queuedPruneEvery is how many calls pass between two looks at the
	// clock for idle agents.
	queuedPruneEvery = 64
)

// queuedQuota is the intake's per-agent quota of calls in the calls
// stream, queued or waiting out their agent's bounds as schedules. The
// agent's queue is counted from the stream (count) only now and then: at
// the agent's first call, then once it has forwarded step calls since
// (fewer when the last count was near the quota). While the agent is
// over the quota its calls are refused, and its queue counted again at
// most once every queuedRecount. Forwarding a call costs a map look-up
// and a decrement.
//
// A count that fails keeps what the last one found: an agent under its
// quota gets step more calls before the next count (fail open, so a slow
// stream does not refuse every agent's calls), one over it stays refused.
type queuedQuota struct {
	max, step int
	count     func(agent string) (int, error)
	now       func() time.Time
	refused   func()
	log       *slog.Logger

	mu     sync.Mutex
	agents map[string]*queuedAgent
	calls  uint64    // calls looked at, to look at the clock every queuedPruneEvery
	pruned time.Time // when idle agents were last forgotten
}

// queuedAgent is what queuedQuota knows of one agent.
type queuedAgent struct {
	left    int       // calls to forward before the next count
	over    bool      // the last count found the agent at its quota
	queued  int       // what the last count found
	counted time.Time // when it was taken
	used    bool      // a call since the last prune
}

// newQueuedQuota is the quota of quota calls per agent (negative: none),
// counted by count. Its step is an eighth of quota, at most
// queuedStepMax.
func newQueuedQuota(quota int, count func(string) (int, error), now func() time.Time, refused func(), log *slog.Logger) *queuedQuota {
	return &queuedQuota{max: quota, step: min(queuedStepMax, max(1, quota/8)), count: count, now: now,
		refused: refused, log: log, agents: map[string]*queuedAgent{}, pruned: now()}
}

// admit reports whether a call of agent may be forwarded: nil, or an
// error wrapping ErrQueuedCallsQuota naming the quota and the count.
func (q *queuedQuota) admit(agent string) error {
	if q.max < 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.calls++; q.calls%queuedPruneEvery == 0 {
		q.prune()
	}
	a := q.agents[agent]
	if a == nil {
		a = &queuedAgent{} // nothing left: counted now
		q.agents[agent] = a
	}
	a.used = true
	switch {
	case a.over && q.now().Sub(a.counted) < queuedRecount:
	case !a.over && a.left > 0:
	default:
		q.recount(agent, a)
	}
	if a.over {
		q.refused()
		return fmt.Errorf("agent %s has %d calls queued, its quota is %d (worker --max-queued-calls): %w; call again once some have run",
			agent, a.queued, q.max, ErrQueuedCallsQuota)
	}
	a.left--
	return nil
}

// recount counts agent's queue.
func (q *queuedQuota) recount(agent string, a *queuedAgent) {
	n, err := q.count(agent)
	a.counted = q.now()
	if err != nil {
		q.log.Warn("call intake: queued calls not counted", "agent", agent, "err", err)
		a.left = q.step
		return
	}
	a.queued, a.over = n, n >= q.max
	a.left = min(q.step, q.max-n)
	if a.over {
		q.log.Warn("call intake: agent at its quota of queued calls, its calls refused", "agent", agent, "queued", n, "quota", q.max)
	}
}

// prune forgets the agents with no call since the last prune, once
// queuedIdle has passed since it.
func (q *queuedQuota) prune() {
	now := q.now()
	if now.Sub(q.pruned) < queuedIdle {
		return
	}
	q.pruned = now
	for agent, a := range q.agents {
		if !a.used {
			delete(q.agents, agent)
		}
		a.used = false
	}
}

// queuedCounter counts an agent's calls in the calls stream, queued and
// waiting out their agent's bounds (bus.CallsOf), from the stream's
// per-subject counts: one request a count, once the stream is open.
// Calls of it do not overlap (queuedQuota's lock).
func (w *Worker) queuedCounter() func(agent string) (int, error) {
	var st jetstream.Stream
	return func(agent string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), queuedCountWait)
		defer cancel()
		if st == nil {
			s, err := w.js.Stream(ctx, bus.StreamCalls)
			if err != nil {
				return 0, fmt.Errorf("count the queued calls of agent %s: %w", agent, err)
			}
			st = s
		}
		n, err := storedOn(ctx, st, bus.CallsOf(agent))
		if err != nil {
			return 0, fmt.Errorf("count the queued calls of agent %s: %w", agent, err)
		}
		return int(n), nil
	}
}

// storedOn counts the messages st stores on the subjects filter matches,
// from the stream's per-subject counts: one request.
func storedOn(ctx context.Context, st jetstream.Stream, filter string) (uint64, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}
