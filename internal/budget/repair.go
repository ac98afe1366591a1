package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// ErrCorrupt: a budget counter's record is not one an enforcer wrote.
var ErrCorrupt = errors.New("corrupt budget counter")

// parseUsage reads a counter strictly: one JSON object of Usage's fields
// and no other, naming its budget and agent, with no negative amount and
// leases that end after they start. Anything else is ErrCorrupt: it is
// neither trusted (an empty object would reset the counter) nor taken as
// a permanent refusal; the charge that finds it repairs it (repair).
func parseUsage(b []byte) (Usage, error) {
	var u Usage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		return Usage{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if dec.More() {
		return Usage{}, fmt.Errorf("%w: data after the record", ErrCorrupt)
	}
	switch {
	case u.Budget == "" || u.Agent == "":
		return Usage{}, fmt.Errorf("%w: names no budget or agent", ErrCorrupt)
	case u.Updated.IsZero():
		return Usage{}, fmt.Errorf("%w: no update time", ErrCorrupt)
	case u.Calls < 0 || u.TimeMS < 0 || u.PerMS < 0 || u.MaxCalls < 0 || u.MaxTimeMS < 0 || u.MaxConcurrent < 0:
		return Usage{}, fmt.Errorf("%w: a negative amount", ErrCorrupt)
	}
	for k, l := range u.Running {
		if k == "" || l.Worker == "" || l.Until.Before(l.Started) {
			return Usage{}, fmt.Errorf("%w: lease %q", ErrCorrupt, k)
		}
	}
	return u, nil
}

// repairScan bounds the time a repair reads the audit trail.
const repairScan = 10 * time.Second

// repair rebuilds the counter of budget b for use u from the charges the
// trail holds: every call of u's agent (and session, and tool, as the
// budget counts them) in the counter's current window that a trusted
// worker's execution audit event, or its signed result, says ran is one
// call and its duration. The results count the calls whose audit event is
// still on its way: a worker publishes the result first and the audit
// right after, so a call the agent already has the answer of may not be
// in the audit yet. Running leases are not known and start empty.
func (e *Enforcer) repair(ctx context.Context, b policy.Budget, u Use, now time.Time) (Usage, error) {
	var rec Usage
	fill(&rec, b, u)
	rec.roll(b, now)
	if e.cfg.Audit == nil {
		return rec, nil // nothing to check a charge's signature with
	}
	tool := "*"
	if b.PerTool && events.ValidToken(u.Tool) == nil {
		tool = u.Tool
	}
	ctx, cancel := context.WithTimeout(ctx, repairScan)
	defer cancel()
	counted := map[string]bool{} // call ids an execution audit event covers
	count := func(a events.AuditData) {
		if charged(a, b, u) {
			rec.Calls++
			rec.TimeMS += max(a.DurationMS, 0)
		}
	}
	err := e.scan(ctx, bus.StreamAudit, events.AuditSubject(u.Agent, tool), rec.WindowStart, func(m jetstream.Msg) {
		ev, a, err := e.cfg.Audit.Audit(m.Subject(), m.Headers(), m.Data())
		if err != nil || ev.Type() != events.TypeCallAudited {
			return // only what a trusted worker signed counts
		}
		if a.Kind == events.AuditExecution {
			counted[a.CallID] = true
		}
		count(*a)
	})
	if err != nil {
		return Usage{}, fmt.Errorf("read the audit trail: %w", err)
	}
	err = e.scan(ctx, bus.StreamResults, events.ResultsOf(u.Agent), rec.WindowStart, func(m jetstream.Msg) {
		callID, ok := strings.CutPrefix(m.Subject(), events.ResultSubject(u.Agent, ""))
		if !ok || counted[callID] {
			return
		}
		r, err := e.cfg.Audit.Result(m.Headers(), m.Data(), u.Agent, callID, "")
		if err != nil {
			return // only what a trusted worker signed counts
		}
		counted[callID] = true
		count(events.AuditData{Kind: events.AuditExecution, CallID: r.CallID, Agent: r.Agent, Tool: r.Tool,
			SessionID: r.SessionID, Status: r.Status, Error: r.Error, DurationMS: r.DurationMS, ParentCallID: r.ParentCallID})
	})
	if err != nil {
		return Usage{}, fmt.Errorf("read the results: %w", err)
	}
	return rec, nil
}

// scan hands each message of stream on subject stored since start (all
// of them when start is zero) to each, in order, until none is left.
func (e *Enforcer) scan(ctx context.Context, stream, subject string, start time.Time, each func(jetstream.Msg)) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
	if !start.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, err := e.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			left--
			each(m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if n == 0 {
			break
		}
	}
	return nil
}

// charged reports whether the execution audited by a was charged to the
// counter of b for u: a call of u's agent (session, tool) that ran, not
// serving a task. (The delegating agent's counter is rebuilt without the
// calls its tasks made: the audit does not say whose budget they spent.)
func charged(a events.AuditData, b policy.Budget, u Use) bool {
	if a.Kind != events.AuditExecution || a.JudgeOnly || a.Agent != u.Agent {
		return false
	}
	if a.ParentCallID != "" {
		// A call serving a delegated task was charged to the delegating
		// agent's budget, not to this one's.
		return false
	}
	if (b.Scope == policy.ScopeSession && a.SessionID != u.Session) || (b.PerTool && a.Tool != u.Tool) || !b.Applies(a.Agent, a.Tool) {
		return false
	}
	switch a.Status {
	case events.StatusOK, events.StatusTimeout, events.StatusInterrupted:
		return true
	case events.StatusError:
		return a.Error == "" // the tool ran and failed; a code is a refusal before it ran
	}
	return false
}
