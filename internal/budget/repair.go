package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// audit trail holds: every execution audit event a trusted worker signed of u's agent (and
// session, and tool, as the budget counts them) in the counter's current
// window whose call ran is one call and its duration. Running leases are
// not known and start empty.
func (e *Enforcer) repair(ctx context.Context, b policy.Budget, u Use, now time.Time) (Usage, error) {
	var rec Usage
	fill(&rec, b, u)
	rec.roll(b, now)
	tool := "*"
	if b.PerTool && events.ValidToken(u.Tool) == nil {
		tool = u.Tool
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AuditSubject(u.Agent, tool)}}
	if !rec.WindowStart.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &rec.WindowStart
	}
	ctx, cancel := context.WithTimeout(ctx, repairScan)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, bus.StreamAudit, cfg)
	if err != nil {
		return Usage{}, fmt.Errorf("read the audit trail: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return Usage{}, fmt.Errorf("read the audit trail: %w", err)
	}
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return Usage{}, fmt.Errorf("read the audit trail: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			left--
			ev, a, err := e.cfg.Audit.Audit(m.Subject(), m.Headers(), m.Data())
			if err != nil || ev.Type() != events.TypeCallAudited {
				continue // only what a trusted worker signed counts
			}
			if charged(*a, b, u) {
				rec.Calls++
				rec.TimeMS += max(a.DurationMS, 0)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return Usage{}, fmt.Errorf("read the audit trail: %w", err)
		}
		if n == 0 {
			break
		}
	}
	return rec, nil
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
