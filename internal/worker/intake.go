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
func (w *Worker) serveIntake() (func(), error) {
	slots := make(chan struct{}, intakeInFlight)
	var wg sync.WaitGroup
	sub, err := w.nc.QueueSubscribe(identity.IntakePrefix+">", intakeQueue, func(m *nats.Msg) {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			w.intake(m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", identity.IntakePrefix+">", err)
	}
	return func() { _ = sub.Unsubscribe(); wg.Wait() }, nil
}

// intake forwards one message from toolgate.intake.<subject> to
// <subject> (toolgate.call.<agent>.<tool>, toolgate.task_result.<agent>.<task>)
// and answers the agent with the stream's own answer (its acknowledgement
// or error), byte for byte. Its Nats-Msg-Id is scoped by the agent the
// subject names, which the agent's credentials enforce: a stream
// deduplicates each agent's messages among its own, and an id one agent
// sends can never drop another's message as a duplicate.
func (w *Worker) intake(m *nats.Msg) {
	subject := strings.TrimPrefix(m.Subject, identity.IntakePrefix)
	agent, ok := intakeAgent(subject)
	if !ok {
		return // no stream takes it
	}
	if strings.HasPrefix(subject, taskResultPrefix) {
		// One answer of an agent at a time, so that its count and the
		// answer's store are one step.
		mu, _ := w.answering.LoadOrStore(agent, &sync.Mutex{})
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
		if err := w.taskAnswerQuota(agent); err != nil {
			w.refuseIntake(m, agent, err)
			return
		}
	}
	if id := m.Header.Get(events.HeaderMsgID); id != "" {
		m.Header.Set(events.HeaderMsgID, ScopedMsgID(agent, id))
	}
	out := &nats.Msg{Subject: subject, Header: m.Header, Data: m.Data}
	if m.Reply == "" {
		if err := w.nc.PublishMsg(out); err != nil {
			w.log.Warn("call intake: not forwarded", "agent", agent, "subject", m.Subject, "err", err)
		}
		return
	}
	ack, err := w.nc.RequestMsg(out, intakeWait)
	if err != nil {
		// The agent's own wait runs out: it publishes again, under the
		// same id.
		w.log.Warn("call intake: not stored", "agent", agent, "subject", m.Subject, "err", err)
		return
	}
	if err := m.Respond(ack.Data); err != nil {
		w.log.Warn("call intake: acknowledgement not passed on", "agent", agent, "err", err)
	}
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
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.TaskResultSubject(agent, ">")))
	if err != nil {
		return fmt.Errorf("count the task answers of agent %s: %w", agent, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
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
// publish error (what its client reports for a stream's refusal), or
// logs it when the agent asked for no answer.
func (w *Worker) refuseIntake(m *nats.Msg, agent string, err error) {
	if m.Reply == "" {
		w.log.Warn("intake: refused", "agent", agent, "subject", m.Subject, "err", err)
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": 429, "description": err.Error()}})
	if rerr := m.Respond(b); rerr != nil {
		w.log.Warn("intake: refusal not passed on", "agent", agent, "err", rerr)
	}
}

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
