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
	"github.com/toolgate/toolgate/pkg/events"
)

// The services agents reach instead of the JetStream API (see
// events.ResultAPIPrefix, events.TaskAPIPrefix). Each request's subject
// names the calling agent, and each answer goes only to the request's
// reply in an inbox (bus.Respond).

// taskWaitMax bounds how long a next-task request waits for a task.
const taskWaitMax = 25 * time.Second

// Bounds of the agent services. Look-ups (stored results, task
// acknowledgements) and task long-polls have pools of their own, so a poll
// waiting for a task never holds a look-up's slot; within each, one agent
// holds at most its per-agent share, and a request past it is refused at
// once (429) rather than queued behind others'.
const (
	// agentAPIConcurrency bounds the look-ups served at once, all agents.
	agentAPIConcurrency = 64
	// agentAPIPerAgent bounds one agent's look-ups in service at once.
	agentAPIPerAgent = 8
	// taskPollConcurrency bounds the task long-polls waiting at once.
	taskPollConcurrency = 64
	// taskPollPerAgent bounds one agent's task long-polls in service at
	// once.
	taskPollPerAgent = 4
)

// agentPool bounds the requests served at once, in all and per agent.
type agentPool struct {
	name     string // the metric's bound attribute
	perAgent int
	sem      chan struct{}
	mu       sync.Mutex
	held     map[string]int
}

func newAgentPool(name string, total, perAgent int) *agentPool {
	return &agentPool{name: name, perAgent: perAgent, sem: make(chan struct{}, total), held: map[string]int{}}
}

// take reserves one of agent's places; false when it holds all of them.
func (p *agentPool) take(agent string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[agent] >= p.perAgent {
		return false
	}
	p.held[agent]++
	return true
}

func (p *agentPool) give(agent string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[agent]--; p.held[agent] <= 0 {
		delete(p.held, agent)
	}
}

// serveAgentAPI subscribes the result and task services until the
// returned stop is called.
func (w *Worker) serveAgentAPI() (stop func(), err error) {
	lookups := newAgentPool("lookups", agentAPIConcurrency, agentAPIPerAgent)
	polls := newAgentPool("task_polls", taskPollConcurrency, taskPollPerAgent)
	handle := func(f func(*nats.Msg) *nats.Msg) nats.MsgHandler {
		return func(m *nats.Msg) {
			pool := lookups
			if strings.HasPrefix(m.Subject, events.TaskAPIPrefix) && strings.HasSuffix(m.Subject, ".next") {
				pool = polls
			}
			agent, _, _ := apiTokens(m.Subject)
			if !pool.take(agent) {
				w.agentRefused(pool.name)
				r := apiStatus("429", fmt.Sprintf("agent %s has %d requests of this kind in service already (its per-agent bound); ask again once one is answered", agent, pool.perAgent))
				if err := bus.Respond(m, r); err != nil {
					w.log.Warn("agent request refusal not answered", "subject", m.Subject, "err", err)
				}
				return
			}
			// The wait for a place in the pool is off the subscription:
			// other agents' requests are read meanwhile.
			go func() {
				pool.sem <- struct{}{}
				defer func() { <-pool.sem; pool.give(agent) }()
				if err := bus.Respond(m, f(m)); err != nil {
					w.log.Warn("agent request not answered", "subject", m.Subject, "err", err)
				}
			}()
		}
	}
	rs, err := w.nc.QueueSubscribe(events.SubjectResultAPI, "workers", handle(w.resultAPI))
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", events.SubjectResultAPI, err)
	}
	ts, err := w.nc.QueueSubscribe(events.SubjectTaskAPI, "workers", handle(w.taskAPI))
	if err != nil {
		_ = rs.Unsubscribe()
		return nil, fmt.Errorf("subscribe %s: %w", events.SubjectTaskAPI, err)
	}
	return func() { _ = rs.Unsubscribe(); _ = ts.Unsubscribe() }, nil
}

// apiStatus is an answer carrying only a status.
func apiStatus(code, reason string) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set(events.APIStatusHeader, strings.TrimSpace(code+" "+reason))
	return m
}

// apiTokens splits toolgate.api.<kind>.<agent>.<x> into agent and x.
func apiTokens(subject string) (agent, x string, ok bool) {
	p := strings.Split(subject, ".")
	if len(p) != 5 || events.ValidToken(p[3]) != nil || events.ValidToken(p[4]) != nil {
		return "", "", false
	}
	return p[3], p[4], true
}

// resultAPI answers the latest stored result of the caller's call
// toolgate.api.result.<agent>.<call id>: the stored message, headers and
// all, or a 404.
func (w *Worker) resultAPI(m *nats.Msg) *nats.Msg {
	agent, id, ok := apiTokens(m.Subject)
	if !ok {
		return apiStatus("400", "want toolgate.api.result.<agent>.<call id>")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := w.results.GetLastMsgForSubject(ctx, events.ResultSubject(agent, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return apiStatus("404", "no result stored")
	}
	if err != nil {
		return apiStatus("500", err.Error())
	}
	out := nats.NewMsg("")
	for k, v := range raw.Header {
		out.Header[k] = v
	}
	out.Data = raw.Data
	return out
}

// taskAPI hands the caller's tasks over: "next" takes one from its task
// consumer (created when missing) and answers the task message with the
// events.TaskAckHeader naming it; "ack", "nak", "wip" and "term" acknowledge the
// message their body names, which must be one of the caller's own.
func (w *Worker) taskAPI(m *nats.Msg) *nats.Msg {
	agent, op, ok := apiTokens(m.Subject)
	if !ok {
		return apiStatus("400", "want toolgate.api.task.<agent>.<op>")
	}
	ctx, cancel := context.WithTimeout(context.Background(), taskWaitMax+10*time.Second)
	defer cancel()
	if op == "next" {
		return w.nextTask(ctx, agent, m.Data)
	}
	verb, ok := map[string]string{"ack": "+ACK", "nak": "-NAK", "wip": "+WPI", "term": "+TERM"}[op]
	if !ok {
		return apiStatus("400", "unknown operation "+op+" (next, ack, nak, wip, term)")
	}
	ackSubject := string(m.Data)
	prefix := "$JS.ACK." + bus.StreamTasks + "." + bus.TaskConsumerName(agent) + "."
	if !strings.HasPrefix(ackSubject, prefix) || strings.ContainsAny(ackSubject, "*> \t\r\n") {
		return apiStatus("400", "not a task of "+agent)
	}
	if op == "wip" || op == "nak" {
		if err := w.nc.Publish(ackSubject, []byte(verb)); err != nil {
			return apiStatus("500", err.Error())
		}
		return nats.NewMsg("")
	}
	// Acknowledged by the server before the agent hears it is done.
	if _, err := w.nc.RequestWithContext(ctx, ackSubject, []byte(verb)); err != nil {
		return apiStatus("500", err.Error())
	}
	return nats.NewMsg("")
}

func (w *Worker) nextTask(ctx context.Context, agent string, body []byte) *nats.Msg {
	var req events.TaskNext
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return apiStatus("400", "body: "+err.Error())
		}
	}
	wait := min(max(time.Duration(req.WaitMS)*time.Millisecond, time.Second), taskWaitMax)
	cons, err := w.js.CreateOrUpdateConsumer(ctx, bus.StreamTasks, bus.TaskConsumer(agent))
	if err != nil {
		return apiStatus("500", "task consumer: "+err.Error())
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		return apiStatus("500", err.Error())
	}
	for tm := range batch.Messages() {
		out := nats.NewMsg("")
		for k, v := range tm.Headers() {
			out.Header[k] = v
		}
		out.Header.Set(events.TaskAckHeader, tm.Reply())
		out.Header.Set(events.TaskSubjectHeader, tm.Subject())
		out.Data = tm.Data()
		return out
	}
	return apiStatus("404", "no task")
}
