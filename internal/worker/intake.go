package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/events"
)

// intakeQueue is the queue group the workers' intakes share: each call
// is forwarded once.
const intakeQueue = "intake"

// Intake bounds: calls being forwarded at once (more wait in the
// subscription's buffer), and how long the stream has to acknowledge one.
const (
	intakeInFlight = 256
	intakeWait     = 10 * time.Second
)

// serveIntake forwards the agents' calls and task answers, which cross
// into the toolgate account under identity.IntakePrefix, into their
// streams until the returned function is called.
//
// A call is forwarded from the subscription's own goroutine with a reply
// subject of the worker's (intakeRelay), and the stream's acknowledgement
// is passed on from that reply subscription's: no goroutine, timer or
// channel per call. A task answer, whose quota is counted before it is
// stored, takes a goroutine of its own and waits for its acknowledgement.
func (w *Worker) serveIntake() (func(), error) {
	r, err := newIntakeRelay(w)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	sub, err := w.nc.QueueSubscribe(identity.IntakePrefix+">", intakeQueue, func(m *nats.Msg) {
		subject := strings.TrimPrefix(m.Subject, identity.IntakePrefix)
		agent, ok := intakeAgent(subject)
		if !ok {
			return // no stream takes it
		}
		if err := streamHeaders(m.Header); err != nil {
			w.refuseIntake(m, agent, http.StatusBadRequest, err)
			return
		}
		if !strings.HasPrefix(subject, taskResultPrefix) {
			if err := w.queued.admit(agent); err != nil {
				if m.Reply != "" { // else counted, and logged by the quota at most once a second
					w.refuseIntake(m, agent, http.StatusTooManyRequests, err)
				}
				return
			}
			r.forward(m, subject, agent)
			return
		}
		r.slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-r.slots; wg.Done() }()
			w.intakeAnswer(m, subject, agent)
		}()
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("subscribe %s: %w", identity.IntakePrefix+">", err)
	}
	return func() {
		_ = sub.Drain()
		// The calls already taken are forwarded.
		for end := time.Now().Add(intakeWait); sub.IsValid() && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		r.drain(intakeWait)
		r.close()
	}, nil
}

// scopeMsgID scopes the Nats-Msg-Id of a message agent sent (ScopedMsgID),
// in place: every value of it, so that no line of the header the stream
// might read names another agent's id.
func scopeMsgID(h nats.Header, agent string) {
	for i, id := range h[events.HeaderMsgID] {
		if id != "" {
			h[events.HeaderMsgID][i] = ScopedMsgID(agent, id)
		}
	}
}

// intakeAnswer forwards one task answer of agent from
// toolgate.intake.<subject> to <subject> once the agent's quota of stored
// answers allows it, and answers the agent with the stream's own answer.
// One answer of an agent at a time, so that its count and the answer's
// store are one step.
func (w *Worker) intakeAnswer(m *nats.Msg, subject, agent string) {
	mu, _ := w.answering.LoadOrStore(agent, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if err := w.taskAnswerQuota(agent); err != nil {
		w.refuseIntake(m, agent, http.StatusTooManyRequests, err)
		return
	}
	scopeMsgID(m.Header, agent)
	out := &nats.Msg{Subject: subject, Header: m.Header, Data: m.Data}
	if m.Reply == "" {
		if err := w.nc.PublishMsg(out); err != nil {
			w.log.Warn("intake: not forwarded", "agent", agent, "subject", m.Subject, "err", err)
		}
		return
	}
	ack, err := w.nc.RequestMsg(out, intakeWait)
	if err != nil {
		// The agent's own wait runs out: it publishes again, under the
		// same id.
		w.log.Warn("intake: not stored", "agent", agent, "subject", m.Subject, "err", err)
		return
	}
	if err := m.Respond(ack.Data); err != nil {
		w.log.Warn("intake: acknowledgement not passed on", "agent", agent, "err", err)
	}
}

// intakeRelay forwards the agents' calls into the calls stream, each with
// a reply subject of its own under one inbox of the worker (inbox.<n>),
// and answers each agent with the stream's own answer to its call (its
// acknowledgement or error), byte for byte, from that inbox's
// subscription. A call the stream has not answered within intakeWait is
// given up (the sweeper): the agent's own wait runs out and it publishes
// again, under the same id.
//
// Each call's Nats-Msg-Id is scoped by the agent its subject names,
// which the agent's credentials enforce: the stream deduplicates each
// agent's calls among its own, and an id one agent sends can never drop
// another's call as a duplicate.
type intakeRelay struct {
	w     *Worker
	inbox string
	sub   *nats.Subscription
	slots chan struct{} // one per message being forwarded (intakeInFlight)
	quit  chan struct{} // ends the sweeper
	mu    sync.Mutex
	seq   uint64
	// pending are the calls forwarded and not yet answered, by the
	// token their reply subject ends with.
	pending map[string]intakePending
}

// intakePending is a forwarded call the stream has not answered yet.
type intakePending struct {
	reply, agent, subject string
	sent                  time.Time
}

func newIntakeRelay(w *Worker) (*intakeRelay, error) {
	r := &intakeRelay{w: w, inbox: w.nc.NewInbox(), slots: make(chan struct{}, intakeInFlight),
		quit: make(chan struct{}), pending: map[string]intakePending{}}
	sub, err := w.nc.Subscribe(r.inbox+".*", r.answer)
	if err != nil {
		return nil, fmt.Errorf("subscribe the intake's acknowledgements: %w", err)
	}
	r.sub = sub
	go r.sweep()
	return r, nil
}

// forward forwards m, a call of agent sent to toolgate.intake.<subject>,
// to subject, waiting for a slot while intakeInFlight calls are being
// forwarded.
func (r *intakeRelay) forward(m *nats.Msg, subject, agent string) {
	if m.Header != nil {
		scopeMsgID(m.Header, agent)
	}
	out := &nats.Msg{Subject: subject, Header: m.Header, Data: m.Data}
	if m.Reply == "" {
		if err := r.w.nc.PublishMsg(out); err != nil {
			r.w.log.Warn("call intake: not forwarded", "agent", agent, "subject", m.Subject, "err", err)
		}
		return
	}
	r.slots <- struct{}{}
	r.mu.Lock()
	r.seq++
	tok := strconv.FormatUint(r.seq, 36)
	r.pending[tok] = intakePending{reply: m.Reply, agent: agent, subject: m.Subject, sent: time.Now()}
	r.mu.Unlock()
	out.Reply = r.inbox + "." + tok
	if err := r.w.nc.PublishMsg(out); err != nil {
		r.take(tok)
		r.w.log.Warn("call intake: not stored", "agent", agent, "subject", m.Subject, "err", err)
	}
}

// take removes the pending call of tok and frees its slot; false when
// there is none (answered already, or given up).
func (r *intakeRelay) take(tok string) (intakePending, bool) {
	r.mu.Lock()
	p, ok := r.pending[tok]
	delete(r.pending, tok)
	r.mu.Unlock()
	if ok {
		<-r.slots
	}
	return p, ok
}

// answer passes the stream's answer ack to the agent whose call it
// answers.
func (r *intakeRelay) answer(ack *nats.Msg) {
	p, ok := r.take(strings.TrimPrefix(ack.Subject, r.inbox+"."))
	if !ok {
		return // given up: the agent publishes again
	}
	if len(ack.Data) == 0 {
		// A status (no responders: no stream), not an answer of the
		// stream's: the agent's own wait runs out and it publishes again.
		r.w.log.Warn("call intake: not stored", "agent", p.agent, "subject", p.subject, "status", ack.Header.Get("Status"))
		return
	}
	if err := r.w.nc.Publish(p.reply, ack.Data); err != nil {
		r.w.log.Warn("call intake: acknowledgement not passed on", "agent", p.agent, "err", err)
	}
}

// sweep gives up, every quarter of intakeWait, the calls the stream has
// not answered within intakeWait.
func (r *intakeRelay) sweep() {
	t := time.NewTicker(intakeWait / 4)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case now := <-t.C:
			r.giveUp(now.Add(-intakeWait))
		}
	}
}

// giveUp gives up the calls forwarded before cutoff.
func (r *intakeRelay) giveUp(cutoff time.Time) {
	r.mu.Lock()
	var late []intakePending
	for tok, p := range r.pending {
		if p.sent.Before(cutoff) {
			delete(r.pending, tok)
			late = append(late, p)
		}
	}
	r.mu.Unlock()
	for _, p := range late {
		<-r.slots
		r.w.log.Warn("call intake: not stored", "agent", p.agent, "subject", p.subject, "err", nats.ErrTimeout)
	}
}

// drain waits, within grace, for the stream's answers to the calls
// forwarded.
func (r *intakeRelay) drain(grace time.Duration) {
	for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		n := len(r.pending)
		r.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// close stops the relay: answers still to come are not passed on.
func (r *intakeRelay) close() {
	close(r.quit)
	_ = r.sub.Unsubscribe()
}

// taskResultPrefix is the subject prefix of task answers.
const taskResultPrefix = events.Prefix + ".task_result."

// TaskAnswersPerAgent bounds the task answers of one agent kept in the
// task answers stream (each for its ResultsMaxAge, 24 hours by default):
// with answers of at most the payload limit (1 MiB by default), 1 GiB
// per agent.
const TaskAnswersPerAgent = 1024

// ErrTaskAnswerQuota is the error of a task answer refused because its
// agent has TaskAnswersPerAgent answers stored.
var ErrTaskAnswerQuota = errors.New("per-agent quota of stored task answers reached")

// taskAnswerQuota refuses a task answer of agent once agent has
// TaskAnswersPerAgent answers in the task answers stream, counted by the
// stream's own per-subject counts. A count that cannot be read refuses
// too (fail closed; the agent publishes again).
func (w *Worker) taskAnswerQuota(agent string) error {
	ctx, cancel := context.WithTimeout(context.Background(), intakeWait)
	defer cancel()
	st, err := w.js.Stream(ctx, bus.StreamTaskResults)
	if err != nil {
		return fmt.Errorf("count the task answers of agent %s: %w", agent, err)
	}
	n, err := storedOn(ctx, st, events.TaskResultSubject(agent, ">"))
	if err != nil {
		return fmt.Errorf("count the task answers of agent %s: %w", agent, err)
	}
	if n >= TaskAnswersPerAgent {
		w.agentRefused(boundTaskAnswers)
		return fmt.Errorf("agent %s has %d task answers stored (answers are kept 24 hours): %w", agent, n, ErrTaskAnswerQuota)
	}
	return nil
}

// boundTaskAnswers is the bound label of task answers refused by
// taskAnswerQuota.
const boundTaskAnswers = "task_answers"

// refuseIntake answers the agent's message with err as a JetStream
// publish error of status code (what its client reports for a stream's
// refusal), or logs it when the agent asked for no answer.
func (w *Worker) refuseIntake(m *nats.Msg, agent string, code int, err error) {
	if m.Reply == "" {
		// Logged at most once a second: an agent's refused messages
		// must not flood the worker's log.
		if now := time.Now().UnixNano(); now-w.intakeLogged.Load() >= int64(time.Second) {
			w.intakeLogged.Store(now)
			w.log.Warn("intake: refused (further refusals within a second not logged)", "agent", agent, "subject", m.Subject, "err", err)
		}
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "description": err.Error()}})
	if rerr := m.Respond(b); rerr != nil {
		w.log.Warn("intake: refusal not passed on", "agent", agent, "err", rerr)
	}
}

// ErrStreamHeader is the error of an agent's message refused by the
// intake for a header the stream or the workers act on (streamHeaders).
var ErrStreamHeader = errors.New("header reserved for the stream and the workers")

// streamHeaders refuses the headers of an agent's message that the
// server acts on when it stores a message, and the workers' own marks of
// a stored call: every header whose name starts with "Nats-" or
// "Toolgate-", in any case, but Nats-Msg-Id (which the intake scopes by
// the agent) and Nats-Request-Info (the server's own account of who sent
// a request across accounts; the stream drops it). The calls stream
// keeps message schedules, and so roll-ups: through Nats-Schedule and
// Nats-Schedule-Target an agent would fire calls onto another agent's
// subject, for ever; through Nats-Rollup purge every agent's queued
// calls; and the server gives more such headers meaning over time (TTLs,
// expectations, batches, counters). HeaderRequeues and HeaderQueuedID
// are the workers' (requeue.go). The message is refused with an error
// naming the header, not forwarded without it: what the agent meant is
// not what would be stored.
func streamHeaders(h nats.Header) error {
	var bad []string
	for k := range h {
		if (hasPrefixFold(k, "Nats-") || hasPrefixFold(k, "Toolgate-")) && k != events.HeaderMsgID && k != requestInfoHeader {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("header %s: %w (an agent may send Nats-Msg-Id, no other Nats-* or Toolgate-* header)", strings.Join(bad, ", "), ErrStreamHeader)
}

// hasPrefixFold reports whether s starts with prefix, in any case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// requestInfoHeader is the header the server adds to a request crossing
// accounts, naming its sender.
const requestInfoHeader = "Nats-Request-Info"

// intakeStreams are the subject prefixes the intake forwards to; the
// token after one is the agent.
var intakeStreams = []string{events.Prefix + ".call.", taskResultPrefix}

// intakeAgent is the agent subject names, when subject is one the intake
// forwards: a known prefix, then <agent>.<more>.
func intakeAgent(subject string) (string, bool) {
	for _, p := range intakeStreams {
		if rest, ok := strings.CutPrefix(subject, p); ok {
			agent, more, ok := strings.Cut(rest, ".")
			return agent, ok && agent != "" && more != ""
		}
	}
	return "", false
}

// ScopedMsgID is the Nats-Msg-Id the calls stream keeps for a message an
// agent sent with id: agent tokens hold no '.', so two agents' ids never
// meet.
func ScopedMsgID(agent, id string) string { return agent + "." + id }
