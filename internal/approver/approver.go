// Package approver is the approver service: it shows parked calls to
// people (a web page with live updates, a JSON API for bots and scripts,
// chat webhooks with an interactivity endpoint for Slack) and publishes
// their decisions, signed with the service's nkey, for the workers to
// verify and act on.
package approver

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/trust"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// Config configures the approver service. Zero values mean the default.
type Config struct {
	// Name names the service in events and its registered key; default
	// the host name.
	Name string
	// Tokens authenticate people (and bots) and name their identity.
	Tokens *Tokens
	// Key signs decisions: the key of the approver's credentials, or
	// LoadOrCreateKey's for a key pinned in the workers' configuration.
	Key nkeys.KeyPair
	// UserJWT is Key's NATS user JWT (role approver) from the approver's
	// credentials; every decision carries it so that workers trusting the
	// issuing account accept the key. Empty: workers must pin the key.
	UserJWT string
	// PublicURL is the page's URL as people reach it, used in
	// notifications; default empty (no links).
	PublicURL string
	// Webhooks are notified of every approval request.
	Webhooks []Webhook
	// Notifier delivers them; default retries with backoff.
	Notifier *Notifier
	// SlackSigningSecret verifies requests to /slack/actions; empty
	// disables the endpoint.
	SlackSigningSecret string
	// SlackUsers maps Slack user ids to approver identities; a Slack user
	// not listed cannot decide.
	SlackUsers map[string]string
	// DecisionWait is how long a decision request waits for a worker to
	// record it before answering 202; default 5s.
	DecisionWait time.Duration
	// SessionTTL is how long a login lasts; default 12h.
	SessionTTL time.Duration
	// History is how many decided calls the page shows; default 50.
	History int
	// Logger receives the service's logs; default slog.Default().
	Logger *slog.Logger
	// Telemetry traces and measures decisions; nil records nothing.
	Telemetry *telemetry.Telemetry
}

// Server is the approver service.
type Server struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	pub      string
	log      *slog.Logger
	sessions *sessions
	now      func() time.Time

	mu    sync.Mutex
	calls map[string]*parking.Parked // call key → record (for the page)
	subs  map[chan struct{}]bool

	obs *observer // spans and metrics (telemetry.go)
}

// New returns the service over nc: it opens the approvals bucket and
// registers the service's public key there, so that workers configured
// with no trusted keys accept its decisions.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Server, error) {
	if cfg.Tokens == nil {
		return nil, errors.New("approver: no tokens configured")
	}
	if cfg.Key == nil {
		return nil, errors.New("approver: no signing key configured")
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Notifier == nil {
		cfg.Notifier = &Notifier{}
	}
	if cfg.DecisionWait <= 0 {
		cfg.DecisionWait = 5 * time.Second
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.History <= 0 {
		cfg.History = 50
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Notifier.Logger == nil {
		cfg.Notifier.Logger = cfg.Logger
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketApprovals)
	if err != nil {
		return nil, fmt.Errorf("approvals bucket %s: %w", bus.BucketApprovals, err)
	}
	pub, err := cfg.Key.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("approver key: %w", err)
	}
	// Decisions of an approver with credentials carry its JWT, which is
	// all a worker needs; only a pinned key (password accounts) is
	// registered, so people can see which key to pin.
	if cfg.UserJWT == "" {
		if err := parking.RegisterApproverKey(ctx, kv, approval.ApproverKey{PublicKey: pub, Name: cfg.Name}); err != nil {
			return nil, err
		}
	}
	seed, _ := cfg.Key.Seed()
	sk := sha256.Sum256(append([]byte("toolgate approver session\x00"), seed...))
	s := &Server{cfg: cfg, nc: nc, js: js, kv: kv, pub: pub, log: cfg.Logger.With("component", "approver"),
		sessions: &sessions{key: sk[:], tokens: cfg.Tokens, ttl: cfg.SessionTTL}, now: time.Now,
		calls: map[string]*parking.Parked{}, subs: map[chan struct{}]bool{}}
	s.obs = newObserver(cfg.Telemetry, s.log)
	return s, nil
}

// PublicKey is the key the service signs decisions with.
func (s *Server) PublicKey() string { return s.pub }

// RequestsConsumer is the configuration of the approver's durable consumer
// of approval requests (it drives notifications, so none is lost while
// the approver is down).
func RequestsConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       bus.ConsumerApprover,
		Description:   "approval requests, notified by the approver service",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxDeliver:    5,
		MaxAckPending: 256,
		FilterSubject: approval.SubjectRequests,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// Run watches the parked calls for the page and notifies webhooks of new
// requests until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() { defer wg.Done(); s.watch(ctx) }()
	go func() { defer wg.Done(); s.resync(ctx) }()
	if len(s.cfg.Webhooks) == 0 {
		<-ctx.Done()
		return nil
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, bus.StreamApprovals, RequestsConsumer())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("requests consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		wg.Add(1)
		go func() { defer wg.Done(); s.notify(ctx, msg) }()
	}, jetstream.PullMaxMessages(32))
	if err != nil {
		return fmt.Errorf("consume requests: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// notify delivers one request to every webhook, each on its own, and acks
// once all deliveries ended.
func (s *Server) notify(ctx context.Context, msg jetstream.Msg) {
	var req approval.Request
	if _, err := events.DecodeData(msg.Headers(), msg.Data(), &req); err != nil {
		s.log.Warn("unreadable approval request", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	if p, _, err := s.get(ctx, req.CallID); err != nil || p.Status != approval.Pending {
		_ = msg.Ack() // decided or gone: nobody needs telling
		return
	}
	stop := make(chan struct{})
	go func() { // keep the message while deliveries retry
		t := time.NewTicker(20 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	var wg sync.WaitGroup
	for _, hook := range s.cfg.Webhooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := Body(hook, req, s.cfg.PublicURL)
			if err != nil {
				s.log.Error("render notification", "call_id", req.CallID, "err", err)
				return
			}
			n, err := s.cfg.Notifier.Deliver(ctx, hook, body)
			if err != nil {
				s.log.Warn("notification not delivered", "call_id", req.CallID, "webhook", redact(hook.URL), "attempts", n, "err", err)
				return
			}
			s.log.Info("notification delivered", "call_id", req.CallID, "webhook", redact(hook.URL), "attempts", n)
		}()
	}
	wg.Wait()
	close(stop)
	_ = msg.Ack()
}

func (s *Server) get(ctx context.Context, callID string) (*parking.Parked, uint64, error) {
	e, err := s.kv.Get(ctx, parking.CallKey(callID))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, callID)
		}
		return nil, 0, err
	}
	var p parking.Parked
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, 0, fmt.Errorf("parked call %s: %w", callID, err)
	}
	return &p, e.Revision(), nil
}

// watch mirrors the parked calls for the page's live view.
func (s *Server) watch(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := s.kv.Watch(ctx, "call.>")
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		for e := range updates(ctx, w) {
			if e == nil {
				s.changed()
				continue
			}
			s.mu.Lock()
			if e.Operation() != jetstream.KeyValuePut {
				delete(s.calls, e.Key())
			} else {
				var p parking.Parked
				if json.Unmarshal(e.Value(), &p) == nil {
					s.calls[e.Key()] = &p
				}
			}
			s.mu.Unlock()
			s.changed()
		}
		_ = w.Stop()
	}
}

// resync re-reads the parked calls every 10 seconds, in case the watch
// went quiet (as after a server restart), and refreshes the page when
// they differ.
func (s *Server) resync(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		all, err := listParked(ctx, s.kv)
		if err != nil {
			continue
		}
		fresh := make(map[string]*parking.Parked, len(all))
		for _, p := range all {
			fresh[parking.CallKey(p.CallID)] = p
		}
		s.mu.Lock()
		same := len(fresh) == len(s.calls)
		for k, p := range fresh {
			if old, ok := s.calls[k]; !ok || old.Status != p.Status || len(old.Approvals) != len(p.Approvals) {
				same = false
			}
		}
		s.calls = fresh
		s.mu.Unlock()
		if !same {
			s.changed()
		}
	}
}

func (s *Server) changed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (s *Server) subscribe() (chan struct{}, func()) {
	c := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[c] = true
	s.mu.Unlock()
	return c, func() { s.mu.Lock(); delete(s.subs, c); s.mu.Unlock() }
}

// Snapshot is what the page shows: pending calls, oldest first, and the
// recent history, newest first.
type Snapshot struct {
	ServerTime time.Time `json:"server_time"`
	Identity   string    `json:"identity"`
	Pending    []View    `json:"pending"`
	History    []View    `json:"history"`
}

func (s *Server) snapshot(identity string) Snapshot {
	s.mu.Lock()
	var pending, done []*parking.Parked
	for _, p := range s.calls {
		if p.Status == approval.Pending {
			pending = append(pending, p)
		} else {
			done = append(done, p)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(pending, func(a, b *parking.Parked) int { return a.ParkedAt.Compare(b.ParkedAt) })
	slices.SortFunc(done, func(a, b *parking.Parked) int { return decidedAt(b).Compare(decidedAt(a)) })
	snap := Snapshot{ServerTime: s.now().UTC(), Identity: identity, Pending: []View{}, History: []View{}}
	for _, p := range pending {
		snap.Pending = append(snap.Pending, viewOf(p))
	}
	for _, p := range done[:min(len(done), s.cfg.History)] {
		snap.History = append(snap.History, viewOf(p))
	}
	return snap
}

func decidedAt(p *parking.Parked) time.Time {
	if p.Outcome != nil {
		return p.Outcome.DecidedAt
	}
	return p.ParkedAt
}

// View is a parked call as the API and the page show it.
type View struct {
	CallID     string          `json:"call_id"`
	Agent      string          `json:"agent"`
	SessionID  string          `json:"session_id,omitempty"`
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
	Rule       string          `json:"rule,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Offending  string          `json:"offending,omitempty"`
	ArgsSHA256 string          `json:"args_sha256"`
	Diff       string          `json:"diff,omitempty"`
	Question   *QuestionView   `json:"question,omitempty"`
	// Approvers is how many distinct people must approve.
	Approvers int `json:"approvers"`
	// ApprovedBy lists who approved so far.
	ApprovedBy  []string  `json:"approved_by,omitempty"`
	Status      string    `json:"status"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Outcome is set once the call is decided.
	Outcome *parking.Outcome `json:"outcome,omitempty"`
	// Scope is the default "always allow" scope for this call.
	Scope *approval.Amendment `json:"always_allow_scope,omitempty"`
}

// QuestionView is a clarify question as shown.
type QuestionView struct {
	Text          string   `json:"question"`
	Choices       []string `json:"choices,omitempty"`
	DefaultAnswer *string  `json:"default_answer,omitempty"`
}

func viewOf(p *parking.Parked) View {
	v := View{CallID: p.CallID, Agent: p.Agent, SessionID: p.SessionID, Tool: p.Tool, Arguments: p.Arguments,
		Rule: p.Decision.Rule, Reason: p.Decision.Reason, Offending: p.Decision.Offending, ArgsSHA256: p.ArgsSHA256,
		Diff: p.Diff, Approvers: p.Threshold(), ApprovedBy: p.ApprovedBy(), Status: string(p.Status),
		RequestedAt: p.ParkedAt, ExpiresAt: p.ExpiresAt, Outcome: p.Outcome}
	if q := p.Question; q != nil {
		v.Question = &QuestionView{Text: q.Text, Choices: q.Choices, DefaultAnswer: q.DefaultAnswer}
	} else if p.Status == approval.Pending {
		var args map[string]any
		_ = json.Unmarshal(p.Arguments, &args)
		sc := approval.DefaultScope(p.Agent, p.Tool, args)
		v.Scope = &sc
		if v.Diff == "" {
			v.Diff = approval.ArgsDiff(p.Tool, args)
		}
	}
	return v
}

// Errors of decisions, mapped to HTTP statuses by the API.
var (
	// ErrNotFound (404): no parked call has that id.
	ErrNotFound = errors.New("no parked call with that id")
	// ErrDecided (409): the call is already decided, or this person
	// already approved it.
	ErrDecided = errors.New("call already decided")
	// ErrBadDecision (400): the decision is malformed (no reason, an
	// answer not among the choices, approve on a question, ...).
	ErrBadDecision = errors.New("bad decision")
	// ErrForbidden (403): the agent that made the call tried to decide it.
	ErrForbidden = errors.New("not allowed to decide this call")
	// ErrRefused (422): a worker refused the decision.
	ErrRefused = errors.New("decision refused by a worker")
)

// Input is what a person decides.
type Input struct {
	// Outcome is approve, reject or answer.
	Outcome approval.Outcome
	// Comment is an optional remark.
	Comment string
	// Reason says why a call is rejected (required).
	Reason string
	// Answer answers a clarify question.
	Answer string
	// AlwaysAllow, on approve, asks for an amendment; its ID, agent and
	// tool are filled in, and an empty scope takes the call's default.
	AlwaysAllow *approval.Amendment
	// Arguments, on approve, are the arguments the person changed the call
	// to (approve with changes, edit.go); empty approves it as parked.
	Arguments json.RawMessage
}

// Result says what became of a decision.
type Result struct {
	CallID string `json:"call_id"`
	// Status is the call's status once a worker recorded the decision
	// (pending while more approvals are needed), or "published" when no
	// worker recorded it within the wait.
	Status string `json:"status"`
	// ApprovedBy lists the approvals recorded so far.
	ApprovedBy []string `json:"approved_by,omitempty"`
	// Amendment is the amendment requested, if any.
	Amendment *approval.Amendment `json:"amendment,omitempty"`
	// EditedArgsSHA256 is the hash of the arguments approved with
	// changes, if any.
	EditedArgsSHA256 string `json:"edited_args_sha256,omitempty"`
}

// Decide checks, signs and publishes identity's decision on callID, then
// waits up to DecisionWait for a worker to record it.
func (s *Server) Decide(ctx context.Context, identity, callID string, in Input) (Result, error) {
	p, _, err := s.get(ctx, callID)
	if err != nil {
		return Result{}, err
	}
	if p.Status.Final() {
		return Result{}, fmt.Errorf("%w: call %s is %s", ErrDecided, callID, p.Status)
	}
	if in.Outcome != approval.Reject && trust.SameName(identity, p.Agent) {
		return Result{}, fmt.Errorf("%w: %q made this call and cannot %s it", ErrForbidden, identity, in.Outcome)
	}
	if in.Outcome == approval.Approve && slices.ContainsFunc(p.ApprovedBy(), func(a string) bool { return trust.SameName(a, identity) }) {
		return Result{}, fmt.Errorf("%w: %q already approved call %s (%d of %d approvals)", ErrDecided, identity, callID, len(p.Approvals), p.Threshold())
	}
	if !s.now().Before(p.ExpiresAt) {
		return Result{}, fmt.Errorf("%w: call %s expired at %s", ErrDecided, callID, p.ExpiresAt.Format(time.RFC3339))
	}
	switch {
	case p.IsClarify() && in.Outcome == approval.Approve:
		return Result{}, fmt.Errorf("%w: call %s asks a question: answer or reject it", ErrBadDecision, callID)
	case !p.IsClarify() && in.Outcome == approval.Answer:
		return Result{}, fmt.Errorf("%w: call %s asks for approval, not an answer", ErrBadDecision, callID)
	case in.Outcome == approval.Answer:
		if err := p.Question.Accepts(in.Answer); err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrBadDecision, err)
		}
	}
	if h := approval.ArgsHash(p.Agent, p.Tool, p.Arguments); h != p.ArgsSHA256 && in.Outcome != approval.Reject {
		return Result{}, fmt.Errorf("%w: the stored arguments of call %s were altered after parking (they hash to %s, not %s)", ErrBadDecision, callID, h, p.ArgsSHA256)
	}
	d := &approval.Decision{CallID: callID, ArgsSHA256: p.ArgsSHA256, Outcome: in.Outcome, Approver: identity, SignerJWT: s.cfg.UserJWT,
		Comment: strings.TrimSpace(in.Comment), Reason: strings.TrimSpace(in.Reason), Answer: in.Answer}
	if a := in.AlwaysAllow; a != nil && in.Outcome == approval.Approve {
		var args map[string]any
		_ = json.Unmarshal(p.Arguments, &args)
		scope := *a
		if scope.CommandPrefix == "" && scope.PathPattern == "" {
			scope = approval.DefaultScope(p.Agent, p.Tool, args)
		}
		scope.ID, scope.Agent, scope.Tool = nuid.Next(), p.Agent, p.Tool
		if err := scope.ScopedTo(p.Agent, p.Tool, args); err != nil {
			return Result{}, fmt.Errorf("%w: always_allow: %v", ErrBadDecision, err)
		}
		d.AlwaysAllow = &scope
	}
	if err := editDecision(p, d, in.Arguments); err != nil {
		return Result{}, err
	}
	d.DecidedAt = s.now()
	if err := d.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBadDecision, err)
	}
	if err := d.Sign(s.cfg.Key); err != nil {
		return Result{}, err
	}
	ctx, span := s.startDecision(ctx, p, identity, in.Outcome)
	defer span.End()

	// Listen for a refusal of this very decision before publishing it.
	refused := make(chan *parking.RefusalError, 4)
	sub, err := s.nc.Subscribe(approval.RefusedSubject(callID), func(m *nats.Msg) {
		var r struct {
			Approver  string `json:"approver"`
			PublicKey string `json:"public_key"`
			Reason    string `json:"reason"`
			Code      string `json:"code"`
		}
		if json.Unmarshal(m.Data, &r) == nil && r.Approver == identity && r.PublicKey == s.pub {
			select {
			case refused <- &parking.RefusalError{Code: r.Code, Reason: r.Reason}:
			default:
			}
		}
	})
	if err == nil {
		defer sub.Unsubscribe()
	}
	msg, err := events.NewMessage(events.ApprovalDecisionSubject(callID), "approval-decision-"+nuid.Next(),
		"toolgate://approver/"+s.cfg.Name, events.TypeApprovalDecided, d)
	if err != nil {
		return Result{}, fmt.Errorf("encode decision: %w", err)
	}
	s.obs.t.InjectHeader(ctx, msg.Header)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return Result{}, fmt.Errorf("publish decision: %w", err)
	}
	s.decided(ctx, p, in.Outcome, d.DecidedAt)
	s.log.InfoContext(ctx, "decision published", "call_id", callID, "agent", p.Agent, "tool", p.Tool, "approver", identity, "outcome", in.Outcome)
	return s.await(ctx, d, refused)
}

// await waits for a worker to record d, to refuse it, or for DecisionWait.
func (s *Server) await(ctx context.Context, d *approval.Decision, refused <-chan *parking.RefusalError) (Result, error) {
	res := Result{CallID: d.CallID, Status: "published", Amendment: d.AlwaysAllow, EditedArgsSHA256: d.EditedArgsSHA256}
	deadline := time.NewTimer(s.cfg.DecisionWait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return res, nil
		case <-deadline.C:
			return res, nil
		case why := <-refused:
			if errors.Is(why, parking.ErrAlreadyDecided) || errors.Is(why, parking.ErrDuplicateApprover) {
				return res, fmt.Errorf("%w: %w", ErrDecided, why)
			}
			return res, fmt.Errorf("%w: %w", ErrRefused, why)
		case <-tick.C:
			p, _, err := s.get(ctx, d.CallID)
			if err != nil {
				continue
			}
			res.ApprovedBy = p.ApprovedBy()
			mine := p.Final != nil && p.Final.Signature == d.Signature
			for _, a := range p.Approvals {
				mine = mine || a.Signature == d.Signature
			}
			switch {
			case mine:
				res.Status = string(p.Status)
				return res, nil
			case p.Status.Final():
				return res, fmt.Errorf("%w: call %s became %s first", ErrDecided, d.CallID, p.Status)
			}
		}
	}
}

// updates is w's channel, ending also when ctx does.
func updates(ctx context.Context, w jetstream.KeyWatcher) <-chan jetstream.KeyValueEntry {
	out := make(chan jetstream.KeyValueEntry)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
