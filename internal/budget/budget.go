// Package budget enforces the budgets of the policy in force across every
// worker of a fleet: how many calls an agent (or a session of it) may
// start in a window, how much execution time they may take, and how many
// may run at once. Each counter is one record of the toolgate_budgets
// key-value bucket, changed only by compare-and-set (a KV update naming
// the revision read, retried on conflict), so any number of workers
// agree. A charge is keyed by its call id: charging the same call again
// changes nothing, and a running call holds a lease its worker renews, so
// a worker that dies does not hold a slot for longer than the lease.
package budget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// DefaultLease is how long a running call holds its concurrency slot
// unless its worker renews it (every third of the lease).
const DefaultLease = 30 * time.Second

// Limits a counter can reach (ExceededError.Limit, the event's limit).
const (
	LimitCalls      = "max_calls"
	LimitTime       = "max_time"
	LimitConcurrent = "max_concurrent"
)

// casAttempts bounds the compare-and-set retries of one change.
const casAttempts = 100

// Config configures an Enforcer. The zero value of each field means its
// default.
type Config struct {
	// Budgets returns the budgets in force (the policy's, read for every
	// call so a new policy applies at once); nil means none.
	Budgets func() []policy.Budget
	// Worker names this worker in leases and events; default host-pid.
	Worker string
	// Lease is how long a running call holds its slot unless renewed;
	// default DefaultLease.
	Lease time.Duration
	// Logger receives the enforcer's logs; default slog.Default().
	Logger *slog.Logger
	// Audit verifies the audit events a corrupt counter is rebuilt from
	// (repair): only events a trusted worker signed count. Nil counts
	// none, and a corrupt counter is rebuilt empty.
	Audit *eventsig.Verifier
}

// Enforcer charges calls to the budgets that apply to them. Every worker
// runs one; they share the bucket.
type Enforcer struct {
	cfg    Config
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	log    *slog.Logger
	source string

	mu   sync.Mutex
	held map[string]map[string]bool // record key → call keys this enforcer holds running
}

// New opens the budgets bucket (provisioned by bus.Provision).
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Enforcer, error) {
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Budgets == nil {
		cfg.Budgets = func() []policy.Budget { return nil }
	}
	kv, err := js.KeyValue(ctx, bus.BucketBudgets)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bus.BucketBudgets, err)
	}
	return &Enforcer{cfg: cfg, js: js, kv: kv, log: cfg.Logger.With("component", "budgets"),
		source: "toolgate://worker/" + cfg.Worker, held: map[string]map[string]bool{}}, nil
}

// Use is one call to charge: who makes it, in which session, of which
// tool (canonical name). A delegated sub-call is charged with the
// parent's agent and session.
type Use struct {
	CallID  string
	Agent   string
	Session string
	Tool    string
}

func (u Use) callKey() string { return u.Agent + "/" + u.CallID }

// Lease is a running call's hold on a concurrency slot.
type Lease struct {
	Worker  string    `json:"worker"`
	Started time.Time `json:"started"`
	Until   time.Time `json:"until"`
}

// Usage is one budget counter as the bucket holds it: what was used in
// the current window, the calls running now, and the limits as of the
// last charge.
type Usage struct {
	Budget  string             `json:"budget"`
	Scope   policy.BudgetScope `json:"scope"`
	Agent   string             `json:"agent"`
	Session string             `json:"session,omitempty"`
	Tool    string             `json:"tool,omitempty"`
	// PerMS is the window in milliseconds; 0 for a counter that never resets.
	PerMS int64 `json:"per_ms,omitempty"`
	// WindowStart is the start of the window Calls and TimeMS count in.
	WindowStart time.Time `json:"window_start,omitzero"`
	Calls       int64     `json:"calls"`
	TimeMS      int64     `json:"time_ms"`
	// Running are the calls running now, by agent/call id.
	Running       map[string]Lease `json:"running,omitempty"`
	MaxCalls      int              `json:"max_calls,omitempty"`
	MaxTimeMS     int64            `json:"max_time_ms,omitempty"`
	MaxConcurrent int              `json:"max_concurrent,omitempty"`
	Updated       time.Time        `json:"updated"`
}

// ResetsAt is when the counter's window ends; zero when it never resets.
func (u *Usage) ResetsAt() time.Time {
	if u.PerMS <= 0 || u.WindowStart.IsZero() {
		return time.Time{}
	}
	return u.WindowStart.Add(time.Duration(u.PerMS) * time.Millisecond)
}

// roll moves the counter to the window holding now (resetting calls and
// time when a new window began) and drops leases that lapsed, counting
// their time up to the lapse. It reports whether anything changed.
func (u *Usage) roll(b policy.Budget, now time.Time) bool {
	changed := false
	if start, _ := b.Window(now); !start.IsZero() && start.After(u.WindowStart) {
		u.WindowStart, u.Calls, u.TimeMS, changed = start, 0, 0, true
	}
	for k, l := range u.Running {
		if l.Until.Before(now) {
			u.TimeMS += max(l.Until.Sub(l.Started).Milliseconds(), 0)
			delete(u.Running, k)
			changed = true
		}
	}
	return changed
}

// ExceededError says which budget refused a call, and when it resets.
type ExceededError struct {
	Budget  policy.Budget
	Agent   string
	Session string
	Tool    string
	// Limit is max_calls, max_time or max_concurrent.
	Limit string
	// Max and Used are in calls, milliseconds or calls at once.
	Max, Used int64
	// ResetsAt is when the window ends; zero for a counter without one
	// and for max_concurrent.
	ResetsAt time.Time
}

// Error names the budget, what is spent, and when it resets.
func (e *ExceededError) Error() string {
	whose := "agent " + e.Agent
	if e.Budget.Scope == policy.ScopeSession {
		whose = fmt.Sprintf("session %q of agent %s", e.Session, e.Agent)
	}
	if e.Budget.PerTool {
		whose += ", tool " + e.Tool
	}
	var used string
	switch e.Limit {
	case LimitCalls:
		used = fmt.Sprintf("%d of %d calls used", e.Used, e.Max)
	case LimitTime:
		used = fmt.Sprintf("%s of %s of execution time used", time.Duration(e.Used)*time.Millisecond, time.Duration(e.Max)*time.Millisecond)
	case LimitConcurrent:
		used = fmt.Sprintf("%d of %d calls already running", e.Used, e.Max)
	}
	msg := fmt.Sprintf("budget %q exceeded (%s): %s for %s", e.Budget.Name, e.Limit, used, whose)
	switch {
	case e.Limit == LimitConcurrent:
		msg += "; a slot frees when one of them ends"
	case !e.ResetsAt.IsZero():
		msg += "; it resets at " + e.ResetsAt.UTC().Format(time.RFC3339)
	case e.Budget.Scope == policy.ScopeSession:
		msg += "; it does not reset for the lifetime of the session"
	default:
		msg += "; it does not reset (the budget has no window)"
	}
	return msg
}

// Unwrap makes errors.Is(err, tools.ErrBudgetExceeded) true.
func (e *ExceededError) Unwrap() error { return tools.ErrBudgetExceeded }

// Data is the error as a dev.toolgate.budget.exceeded.v1 event's data.
func (e *ExceededError) Data(callID, worker string) events.BudgetExceededData {
	d := events.BudgetExceededData{CallID: callID, Agent: e.Agent, SessionID: e.Session, Tool: e.Tool,
		Budget: e.Budget.Name, Scope: string(e.Budget.Scope), Limit: e.Limit, Max: e.Max, Used: e.Used,
		Message: e.Error(), Worker: worker}
	if !e.ResetsAt.IsZero() && e.Limit != LimitConcurrent {
		t := e.ResetsAt.UTC()
		d.ResetsAt = &t
	}
	return d
}

// Charge is a call charged to its budgets; Release ends it.
type Charge struct {
	e     *Enforcer
	use   Use
	keys  []string
	start time.Time
	// Remaining is the execution time left in the tightest max_time
	// budget when the call was charged; 0 when no such budget applies.
	Remaining time.Duration
	once      sync.Once
}

// target is one budget counter a charge goes to.
type target struct {
	b   policy.Budget
	key string
}

func (e *Enforcer) targets(u Use) []target {
	var out []target
	for _, b := range e.cfg.Budgets() {
		if b.Applies(u.Agent, u.Tool) {
			out = append(out, target{b: b, key: recordKey(b, u)})
		}
	}
	return out
}

// Charge counts u against every budget that applies to it: one call more,
// and one running until Release. When a budget is spent it returns an
// *ExceededError (wrapping tools.ErrBudgetExceeded) and charges nothing.
// Charging a call id again returns a charge without counting it twice.
func (e *Enforcer) Charge(ctx context.Context, u Use) (*Charge, error) {
	ch := &Charge{e: e, use: u, start: time.Now()}
	for _, t := range e.targets(u) {
		left, err := e.charge(ctx, t, u)
		if err != nil {
			for _, k := range ch.keys { // undo: the call does not run
				if uerr := e.release(context.WithoutCancel(ctx), k, u.callKey(), false); uerr != nil {
					e.log.Warn("undo budget charge", "call_id", u.CallID, "counter", k, "err", uerr)
				}
			}
			return nil, err
		}
		ch.keys = append(ch.keys, t.key)
		if left > 0 && (ch.Remaining == 0 || left < ch.Remaining) {
			ch.Remaining = left
		}
	}
	e.mu.Lock()
	for _, k := range ch.keys {
		if e.held[k] == nil {
			e.held[k] = map[string]bool{}
		}
		e.held[k][u.callKey()] = true
	}
	e.mu.Unlock()
	return ch, nil
}

// Release ends the call's hold: its execution time since the charge is
// counted and its concurrency slot freed. Releasing again does nothing.
func (c *Charge) Release(ctx context.Context) {
	c.once.Do(func() {
		e := c.e
		e.mu.Lock()
		for _, k := range c.keys {
			delete(e.held[k], c.use.callKey())
			if len(e.held[k]) == 0 {
				delete(e.held, k)
			}
		}
		e.mu.Unlock()
		for _, k := range c.keys {
			if err := e.release(ctx, k, c.use.callKey(), true); err != nil {
				e.log.Warn("release budget", "call_id", c.use.CallID, "counter", k, "err", err)
			}
		}
	})
}

// charge adds u to one counter; it returns the execution time left in it
// (0 when it has no max_time).
func (e *Enforcer) charge(ctx context.Context, t target, u Use) (time.Duration, error) {
	ck := u.callKey()
	var left time.Duration
	fix := func(now time.Time) (Usage, error) { return e.repair(ctx, t.b, u, now) }
	err := e.update(ctx, t.key, fix, func(rec *Usage, now time.Time) (bool, error) {
		b := t.b
		fill(rec, b, u)
		changed := rec.roll(b, now)
		if b.MaxTime > 0 {
			left = max(b.MaxTime-time.Duration(rec.TimeMS)*time.Millisecond, 0)
		}
		if _, ok := rec.Running[ck]; ok {
			return changed, nil // charged before: a retry after a lost answer
		}
		ex := &ExceededError{Budget: b, Agent: u.Agent, Session: u.Session, Tool: u.Tool}
		if !rec.WindowStart.IsZero() {
			ex.ResetsAt = rec.ResetsAt()
		}
		switch {
		case b.MaxCalls > 0 && rec.Calls >= int64(b.MaxCalls):
			ex.Limit, ex.Max, ex.Used = LimitCalls, int64(b.MaxCalls), rec.Calls
		case b.MaxTime > 0 && rec.TimeMS >= b.MaxTime.Milliseconds():
			ex.Limit, ex.Max, ex.Used = LimitTime, b.MaxTime.Milliseconds(), rec.TimeMS
		case b.MaxConcurrent > 0 && len(rec.Running) >= b.MaxConcurrent:
			ex.Limit, ex.Max, ex.Used = LimitConcurrent, int64(b.MaxConcurrent), int64(len(rec.Running))
		default:
			rec.Calls++
			if rec.Running == nil {
				rec.Running = map[string]Lease{}
			}
			rec.Running[ck] = Lease{Worker: e.cfg.Worker, Started: now, Until: now.Add(e.cfg.Lease)}
			return true, nil
		}
		return changed, ex
	})
	return left, err
}

// release takes a call off a counter: with count, its time since it
// started is added; without, the charge is undone (the call did not run).
// A call not on the counter (released before, or its lease lapsed and
// was counted) changes nothing.
func (e *Enforcer) release(ctx context.Context, key, ck string, count bool) error {
	return e.update(ctx, key, nil, func(rec *Usage, now time.Time) (bool, error) {
		l, ok := rec.Running[ck]
		if !ok {
			return false, nil
		}
		delete(rec.Running, ck)
		if count {
			rec.TimeMS += max(now.Sub(l.Started).Milliseconds(), 0)
		} else {
			rec.Calls = max(rec.Calls-1, 0)
		}
		return true, nil
	})
}

// update reads the counter at key, lets change modify it, and writes it
// back naming the revision read, again until no other writer came in
// between. change reports whether it changed the record; its error is
// returned after the record is written (when changed) or at once. A
// record that does not parse strictly (parseUsage), or a missing one, is
// replaced by what fix rebuilds; without fix (a release, a renewal) it is an error and
// the record is left for the next charge to repair.
func (e *Enforcer) update(ctx context.Context, key string, fix func(now time.Time) (Usage, error), change func(rec *Usage, now time.Time) (bool, error)) error {
	var last error
	for attempt := 0; attempt < casAttempts; attempt++ {
		if attempt > 0 {
			// Jittered backoff: workers colliding on one counter spread out.
			d := time.Duration(rand.Int64N(int64(min(attempt, 20))*int64(time.Millisecond))) + time.Millisecond
			select {
			case <-ctx.Done():
				return fmt.Errorf("budget counter %s: %w (last: %v)", key, ctx.Err(), last)
			case <-time.After(d):
			}
		}
		var rec Usage
		var rev uint64
		repaired := false
		now := time.Now().UTC()
		entry, err := e.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) && fix != nil:
			// A counter never written, expired, or deleted: what the
			// audit trail says was charged counts, so a purge gives
			// nothing back.
			var ferr error
			if rec, ferr = fix(now); ferr != nil {
				return fmt.Errorf("budget counter %s: missing, and it could not be rebuilt: %w", key, ferr)
			}
			repaired = rec.Calls > 0 || rec.TimeMS > 0
			now = time.Now().UTC() // the rebuild took a while: leases start now
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			last = err
			continue
		default:
			rev = entry.Revision()
			if rec, err = parseUsage(entry.Value()); err != nil {
				if fix == nil {
					return fmt.Errorf("budget counter %s: %w", key, err)
				}
				e.log.Warn("budget counter corrupt; rebuilt from the audited charges", "counter", key, "err", err)
				var ferr error
				if rec, ferr = fix(now); ferr != nil {
					return fmt.Errorf("budget counter %s: %w, and it could not be rebuilt: %w", key, err, ferr)
				}
				repaired = true
			}
		}
		changed, cerr := change(&rec, now)
		changed = changed || repaired
		if !changed {
			return cerr
		}
		rec.Updated = now
		val, _ := json.Marshal(&rec)
		if rev == 0 {
			_, err = e.kv.Create(ctx, key, val)
		} else {
			_, err = e.kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return cerr
		}
		last = err
	}
	return fmt.Errorf("budget counter %s: no update after %d attempts: %w", key, casAttempts, last)
}

// Run renews the leases of the calls this enforcer holds, every third of
// the lease, until ctx ends.
func (e *Enforcer) Run(ctx context.Context) {
	t := time.NewTicker(e.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.renew(ctx)
		}
	}
}

func (e *Enforcer) renew(ctx context.Context) {
	e.mu.Lock()
	held := make(map[string][]string, len(e.held))
	for k, calls := range e.held {
		for ck := range calls {
			held[k] = append(held[k], ck)
		}
	}
	e.mu.Unlock()
	for key, calls := range held {
		err := e.update(ctx, key, nil, func(rec *Usage, now time.Time) (bool, error) {
			changed := false
			for _, ck := range calls {
				if l, ok := rec.Running[ck]; ok {
					l.Until = now.Add(e.cfg.Lease)
					rec.Running[ck] = l
					changed = true
				}
			}
			return changed, nil
		})
		if err != nil {
			e.log.Warn("renew budget leases", "counter", key, "err", err)
		}
	}
}

// recordKey is the bucket key of u's counter of b:
// <budget>.<agent>[.<session>][.<tool>], each token itself when key-safe,
// else "=" and a hash.
func recordKey(b policy.Budget, u Use) string {
	k := b.Name + "." + token(u.Agent)
	if b.Scope == policy.ScopeSession {
		k += "." + token(u.Session)
	}
	if b.PerTool {
		k += "." + token(u.Tool)
	}
	return k
}

func token(s string) string {
	if s == "" {
		return "=none"
	}
	if len(s) <= 64 {
		safe := true
		for _, r := range s {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				safe = false
				break
			}
		}
		if safe {
			return s
		}
	}
	sum := sha256.Sum256([]byte(s))
	return "=" + hex.EncodeToString(sum[:12])
}

// fill sets the counter's identity and limits from the budget.
func fill(rec *Usage, b policy.Budget, u Use) {
	rec.Budget, rec.Scope, rec.Agent = b.Name, b.Scope, u.Agent
	if b.Scope == policy.ScopeSession {
		rec.Session = u.Session
	}
	if b.PerTool {
		rec.Tool = u.Tool
	}
	rec.PerMS = b.Per.Milliseconds()
	rec.MaxCalls, rec.MaxTimeMS, rec.MaxConcurrent = b.MaxCalls, b.MaxTime.Milliseconds(), b.MaxConcurrent
}
