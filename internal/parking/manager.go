package parking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
)

// ResumeFunc continues a decided call: the worker re-evaluates the policy in
// force now, runs the call when it was approved (or answered), and
// publishes the result (rejected or expired otherwise). The Manager calls
// it once per decided call; an error makes it try again later with backoff,
// so it must be safe to call again for a call it already finished.
type ResumeFunc func(ctx context.Context, p *Parked, o Outcome) error

// Options configures a Manager. The zero value is the default.
type Options struct {
	// Name names this worker in claims and events; default host-pid.
	Name string
	// TrustedKeys are nkey user public keys (U...) pinned as approvers
	// (worker --trusted-approvers): their decisions count without a JWT.
	TrustedKeys []string
	// TrustedAccounts are the account public keys (A...) whose user JWTs
	// with role approver make a key an approver: the toolgate account of
	// this install, learnt from the worker's own credentials. With neither
	// TrustedKeys nor TrustedAccounts every decision is refused; a key
	// merely registered on the bus never counts.
	TrustedAccounts []string
	// DefaultTimeout is how long people have when the rule sets nothing;
	// default approval.DefaultTimeout (10 minutes).
	DefaultTimeout time.Duration
	// SweepInterval is how often expired calls and lapsed claims are looked
	// for; default 1s.
	SweepInterval time.Duration
	// RescanInterval is how often the sweep re-reads every parked call from
	// the bucket rather than trusting its watch alone (a watch can go quiet
	// after a server restart); default 10s.
	RescanInterval time.Duration
	// ClaimLease is how long a resume claim lasts unless renewed; renewed
	// every third of it while the resume runs; default 1 minute.
	ClaimLease time.Duration
	// Retention is how long a resumed call's record is kept for the
	// history before the sweep deletes it; default 24h.
	Retention time.Duration
	// MaxResumes bounds resumes running at once; default 16.
	MaxResumes int
	// DecisionAckWait is the decisions consumer's ack wait; default 30s.
	DecisionAckWait time.Duration
	// MaxParkedPerAgent bounds the calls of one agent waiting for people
	// at once; a call over it is refused with ErrTooManyParked (its agent
	// gets an error result; nothing is parked). Default
	// DefaultMaxParkedPerAgent; negative means no bound. Counted from this
	// manager's view of the bucket, so workers parking at the same moment
	// may let a few more through.
	MaxParkedPerAgent int
	// EditJudge judges the arguments of an approval with changes before it
	// counts (schema and policy, see EditJudge); nil refuses every edit.
	EditJudge EditJudge
	// Logger receives the manager's logs; default slog.Default().
	Logger *slog.Logger
}

// DefaultMaxParkedPerAgent is Options.MaxParkedPerAgent's default.
const DefaultMaxParkedPerAgent = 100

// ErrTooManyParked refuses to park a call whose agent has
// Options.MaxParkedPerAgent calls waiting for people already.
var ErrTooManyParked = errors.New("too many calls waiting for people")

func (o Options) withDefaults() Options {
	if o.MaxParkedPerAgent == 0 {
		o.MaxParkedPerAgent = DefaultMaxParkedPerAgent
	}
	if o.Name == "" {
		host, _ := os.Hostname()
		o.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = approval.DefaultTimeout
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	if o.RescanInterval <= 0 {
		o.RescanInterval = 10 * time.Second
	}
	if o.ClaimLease <= 0 {
		o.ClaimLease = time.Minute
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.MaxResumes <= 0 {
		o.MaxResumes = 16
	}
	if o.DecisionAckWait <= 0 {
		o.DecisionAckWait = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// DecisionsConsumer is the configuration of the decisions consumer every
// worker shares.
func DecisionsConsumer(ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       bus.ConsumerApprovalDecisions,
		Description:   "approval decisions, shared by every worker",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    10,
		BackOff:       nil,
		MaxAckPending: 1024,
		FilterSubject: approval.SubjectDecisions,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// Manager parks calls and resumes them once decided. Every worker runs one;
// they share the bucket and the decisions consumer, and compare-and-set on
// the parked record makes them agree.
type Manager struct {
	opts   Options
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	policy jetstream.KeyValue
	log    *slog.Logger
	runner fate.Runner // settles decision messages
	trust  *trust.Verifier
	now    func() time.Time

	mu           sync.Mutex
	index        map[string]*Parked // call key → last seen record
	busy         map[string]bool    // call keys this manager is resuming
	amendRefused map[string]string  // amendments refused, told once
	sem          chan struct{}
	resumes      sync.WaitGroup
}

// NewManager opens the approvals and policy buckets (provisioned by
// bus.Provision) and creates the shared decisions consumer.
func NewManager(ctx context.Context, js jetstream.JetStream, opts Options) (*Manager, error) {
	opts = opts.withDefaults()
	m := &Manager{opts: opts, js: js, log: opts.Logger.With("component", "approvals", "worker", opts.Name),
		now: time.Now, index: map[string]*Parked{}, busy: map[string]bool{},
		sem: make(chan struct{}, opts.MaxResumes)}
	m.runner = fate.Runner{Consumer: bus.ConsumerApprovalDecisions, Logger: m.log}
	var err error
	if m.kv, err = js.KeyValue(ctx, bus.BucketApprovals); err != nil {
		return nil, fmt.Errorf("approvals bucket %s: %w", bus.BucketApprovals, err)
	}
	if m.policy, err = js.KeyValue(ctx, bus.BucketPolicy); err != nil {
		return nil, fmt.Errorf("policy bucket %s: %w", bus.BucketPolicy, err)
	}
	if m.trust, err = trust.NewVerifier(opts.TrustedAccounts, map[trust.Role][]string{trust.RoleApprover: opts.TrustedKeys}); err != nil {
		return nil, fmt.Errorf("trusted approvers: %w", err)
	}
	if m.trust.Empty() {
		m.log.Error("no trusted approvers: neither a trusted account nor pinned approver keys are configured, " +
			"so every decision will be refused and parked calls will expire; run with credentials or --trusted-approvers")
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, bus.StreamApprovals, DecisionsConsumer(opts.DecisionAckWait)); err != nil {
		return nil, fmt.Errorf("decisions consumer: %w", err)
	}
	return m, nil
}

// Name is the worker name the manager claims calls under.
func (m *Manager) Name() string { return m.opts.Name }

// Park stores the parked call (pending, keyed by call id, with its expiry:
// the question's or rule's timeout, else the default) and publishes its
// approval request on toolgate.approval.request.<call id>, deduplicated by
// Nats-Msg-Id. Parking the same call again is harmless; parking a different
// call under a taken id fails with ErrConflict.
func (m *Manager) Park(ctx context.Context, p *Parked) error {
	if err := p.prepare(m.now(), m.opts.DefaultTimeout); err != nil {
		return err
	}
	if p.Worker == "" {
		p.Worker = m.opts.Name
	}
	rec, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("park %s: encode: %w", p.CallID, err)
	}
	key := CallKey(p.Agent, p.CallID)
	if n, over := m.overQuota(key, p.Agent); over {
		return fmt.Errorf("%w: agent %s has %d calls waiting for people, the most a worker parks for one agent (worker --max-parked); have them decided or cancel some, then call again",
			ErrTooManyParked, p.Agent, n)
	}
	if _, err := m.kv.Create(ctx, key, rec); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("park %s: %w", p.CallID, err)
		}
		old, _, gerr := m.get(ctx, p.Agent, p.CallID)
		if gerr != nil {
			return fmt.Errorf("park %s: %w", p.CallID, gerr)
		}
		if old.ArgsSHA256 != p.ArgsSHA256 {
			return fmt.Errorf("%w: call %s", ErrConflict, p.CallID)
		}
		if old.Status.Final() {
			return nil // decided already; nothing to ask
		}
		*p = *old
	}
	msg, err := events.NewMessage(events.ApprovalRequestSubject(p.CallID), "approval-request-"+p.CallID,
		"toolgate://worker/"+m.opts.Name, events.TypeApprovalRequested, p.Request())
	if err != nil {
		return fmt.Errorf("park %s: encode request: %w", p.CallID, err)
	}
	if _, err := m.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("park %s: publish request: %w", p.CallID, err)
	}
	m.mu.Lock()
	if _, known := m.index[key]; !known {
		cp := *p
		m.index[key] = &cp
	}
	m.mu.Unlock()
	m.log.Info("call parked", "call_id", p.CallID, "agent", p.Agent, "tool", p.Tool,
		"rule", p.Decision.Rule, "approvers", p.Threshold(), "expires_at", p.ExpiresAt)
	return nil
}

// overQuota reports whether agent has MaxParkedPerAgent calls pending
// already, and how many. A call already parked (a redelivery) is never
// over: parking it again changes nothing.
func (m *Manager) overQuota(key, agent string) (int, bool) {
	max := m.opts.MaxParkedPerAgent
	if max < 0 {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.index[key]; known {
		return 0, false
	}
	n := 0
	for _, q := range m.index {
		if q.Agent == agent && !q.Status.Final() {
			n++
		}
	}
	return n, n >= max
}

// Get returns the parked record of callID, or ErrNotFound; when several
// agents parked calls of that id, ErrConflict (GetOf names the agent).
func (m *Manager) Get(ctx context.Context, callID string) (*Parked, error) {
	p, _, err := m.get(ctx, "", callID)
	return p, err
}

// GetOf returns the parked record of agent's call callID, or ErrNotFound.
func (m *Manager) GetOf(ctx context.Context, agent, callID string) (*Parked, error) {
	p, _, err := m.get(ctx, agent, callID)
	return p, err
}

func (m *Manager) get(ctx context.Context, agent, callID string) (*Parked, uint64, error) {
	return GetParked(ctx, m.kv, agent, callID)
}

// GetParked reads the parked call callID of agent from the approvals
// bucket kv, with its revision. An empty agent finds the call by its id
// alone: ErrConflict when several agents parked one of that id.
func GetParked(ctx context.Context, kv jetstream.KeyValue, agent, callID string) (*Parked, uint64, error) {
	key := CallKey(agent, callID)
	if agent == "" {
		lister, err := kv.ListKeysFiltered(ctx, callKeyPrefix+"*."+keyToken(callID))
		if err != nil {
			return nil, 0, fmt.Errorf("find parked call %s: %w", callID, err)
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		switch len(keys) {
		case 0:
			return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, callID)
		case 1:
			key = keys[0]
		default:
			return nil, 0, fmt.Errorf("%w: call id %s is parked by %d agents; name the agent", ErrConflict, callID, len(keys))
		}
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, callID)
		}
		return nil, 0, fmt.Errorf("get parked call %s: %w", callID, err)
	}
	var p Parked
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, 0, fmt.Errorf("%w: record %s: %v", ErrInvalidParked, e.Key(), err)
	}
	if agent == "" && CallKey(p.Agent, p.CallID) != key {
		return nil, 0, fmt.Errorf("%w: record %s is of %s's call %s", ErrInvalidParked, key, p.Agent, p.CallID)
	}
	return &p, e.Revision(), nil
}

// Pending lists the calls waiting for a decision, oldest first.
func (m *Manager) Pending(ctx context.Context) ([]*Parked, error) {
	all, err := List(ctx, m.kv)
	if err != nil {
		return nil, err
	}
	var out []*Parked
	for _, p := range all {
		if p.Status == approval.Pending {
			out = append(out, p)
		}
	}
	return out, nil
}

// List returns every parked-call record in the approvals bucket kv (pending
// and decided), oldest first.
func List(ctx context.Context, kv jetstream.KeyValue) ([]*Parked, error) {
	lister, err := kv.ListKeysFiltered(ctx, callKeyPrefix+">")
	if err != nil {
		return nil, fmt.Errorf("list parked calls: %w", err)
	}
	defer lister.Stop()
	var out []*Parked
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return nil, fmt.Errorf("list parked calls: %s: %w", key, err)
		}
		var p Parked
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			continue // not ours to judge here; the sweep logs it
		}
		out = append(out, &p)
	}
	slices.SortFunc(out, func(a, b *Parked) int { return a.ParkedAt.Compare(b.ParkedAt) })
	return out, nil
}

// Run consumes decisions and sweeps for expired calls and lapsed claims
// until ctx ends, calling resume once for every call that becomes final.
// It returns after the resumes it started have returned (their ctx is
// cancelled with Run's).
func (m *Manager) Run(ctx context.Context, resume ResumeFunc) error {
	if resume == nil {
		return errors.New("approvals: Run needs a resume callback")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer m.resumes.Wait()

	cons, err := m.js.CreateOrUpdateConsumer(ctx, bus.StreamApprovals, DecisionsConsumer(m.opts.DecisionAckWait))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("decisions consumer: %w", err)
	}
	cc, err := cons.Consume(m.runner.Consume(ctx, func(ctx context.Context, msg fate.Message) fate.Fate {
		return m.handleDecision(ctx, msg, resume)
	}),
		jetstream.PullMaxMessages(16), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if ctx.Err() == nil {
				m.log.Debug("decisions consumer", "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("consume decisions: %w", err)
	}
	defer cc.Stop()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.watchCalls(ctx) }()
	t := time.NewTicker(m.opts.SweepInterval)
	defer t.Stop()
	rescan := time.NewTicker(m.opts.RescanInterval)
	defer rescan.Stop()
	for {
		select {
		case <-ctx.Done():
			cc.Stop()
			wg.Wait()
			return nil
		case <-rescan.C:
			m.rescan(ctx)
		case <-t.C:
			m.sweep(ctx, resume)
		}
	}
}

// watchCalls keeps the index of parked calls the sweep walks, re-opening
// the watch when it ends (server restart).
func (m *Manager) watchCalls(ctx context.Context) {
	bus.WatchKV(ctx, m.kv, callKeyPrefix+">", m.log, func(e jetstream.KeyValueEntry) {
		if e == nil {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if e.Operation() != jetstream.KeyValuePut {
			delete(m.index, e.Key())
			return
		}
		var p Parked
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			m.log.Error("unreadable parked record", "key", e.Key(), "err", err)
			return
		}
		m.index[e.Key()] = &p
	})
}

// rescan rebuilds the index from the bucket.
func (m *Manager) rescan(ctx context.Context) {
	all, err := List(ctx, m.kv)
	if err != nil {
		m.log.Debug("rescan parked calls", "err", err)
		return
	}
	index := make(map[string]*Parked, len(all))
	for _, p := range all {
		index[CallKey(p.Agent, p.CallID)] = p
	}
	m.mu.Lock()
	m.index = index
	m.mu.Unlock()
}

// Signer returns who signed d when it may approve: its key pinned in
// TrustedKeys, or vouched for by a user JWT with role approver from a
// trusted account, carried in the decision or registered by the approver
// service under approver.<public key> in the approvals bucket. The
// signature itself is not checked here.
func (m *Manager) Signer(ctx context.Context, d *approval.Decision) (trust.Identity, error) {
	if d.SignerJWT != "" {
		return m.trust.Key(d.PublicKey, d.SignerJWT, trust.RoleApprover)
	}
	id, err := m.trust.Key(d.PublicKey, "", trust.RoleApprover)
	if err == nil || !errors.Is(err, trust.ErrUnknownKey) {
		return id, err
	}
	// A registration is harmless: its JWT is signed by the account.
	if e, gerr := m.kv.Get(ctx, approverKeyPrefix+d.PublicKey); gerr == nil {
		var k approval.ApproverKey
		if json.Unmarshal(e.Value(), &k) == nil && k.JWT != "" {
			return m.trust.Key(d.PublicKey, k.JWT, trust.RoleApprover)
		}
	}
	return id, err
}
