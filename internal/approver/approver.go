// Package approver is the approver service: it shows parked calls to
// people (a web page with live updates, a JSON API for bots and scripts,
// chat webhooks with an interactivity endpoint for Slack) and publishes
// their decisions, signed with the service's nkey, for the workers to
// verify and act on.
package approver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/approval"
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
	// SecureCookie says when the session cookie is marked Secure:
	// SecureCookieAuto (the default, also for empty), SecureCookieAlways,
	// SecureCookieNever.
	SecureCookie string
	// TrustedProxies are the peers whose X-Forwarded-Proto or Forwarded
	// header says whether the client used HTTPS (SecureCookieAuto); nil:
	// DefaultTrustedProxies.
	TrustedProxies []netip.Prefix
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
	// Deliveries retry for a while: the runner keeps each request in
	// progress (its ack wait is a minute) until they end.
	r := fate.Runner{Consumer: bus.ConsumerApprover, Logger: s.log, KeepAlive: 20 * time.Second}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(ctx, msg, s.notify) }()
	}, jetstream.PullMaxMessages(32))
	if err != nil {
		return fmt.Errorf("consume requests: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}
