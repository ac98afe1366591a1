package approver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/trust"
)

// Options is the approver command's configuration.
type Options struct {
	// NATSURL is the NATS server or cluster (default nats://127.0.0.1:4222,
	// the worker's embedded server).
	NATSURL string
	// Listen is the HTTP address (default 127.0.0.1:8470).
	Listen string
	// TokenFile holds `<identity> <token>` lines; default <DataDir>/tokens,
	// created with one token for $USER when missing.
	TokenFile string
	// DataDir holds the default token file and, when the approver connects
	// without credentials (a password URL), the signing key approver.nk;
	// default <state dir>/approver ($XDG_STATE_HOME/toolgate/approver).
	DataDir string
	// Creds is the approver's NATS .creds file (role approver): it
	// connects with them, and decisions are signed with its key and carry
	// its JWT. Empty: $TOOLGATE_CREDS, else minted from the state
	// directory's install (`toolctl creds approver NAME` makes one for
	// another machine).
	Creds string
	// Name names the service (default the host name).
	Name string
	// PublicURL is the page's URL as people reach it (for links in
	// notifications); default http://<Listen>.
	PublicURL string
	// SecureCookie says when the session cookie is marked Secure: auto
	// (default), always, never (Config.SecureCookie).
	SecureCookie string
	// TrustedProxies are the peers whose proxy headers count
	// (Config.TrustedProxies); nil: DefaultTrustedProxies.
	TrustedProxies []netip.Prefix
	// Webhooks receive generic JSON notifications.
	Webhooks []string
	// WebhookSecretFile holds the HMAC secret for generic webhooks.
	WebhookSecretFile string
	// SlackWebhooks receive Slack messages (incoming-webhook URLs).
	SlackWebhooks []string
	// SlackSigningSecretFile holds the Slack app's signing secret; it
	// enables POST /slack/actions.
	SlackSigningSecretFile string
	// SlackUsersFile maps Slack users to identities: `<identity> <slack user id>` per line.
	SlackUsersFile string
	// Logger receives logs; default slog.Default().
	Logger *slog.Logger
	// Out receives start-up lines; default os.Stdout.
	Out io.Writer
	// Ready, if set, is called with the HTTP address once serving.
	Ready func(addr string)
	// MetricsListen, when set, serves /metrics, /healthz and /readyz there.
	MetricsListen string
	// Telemetry, if set, is used instead of the OTEL_* environment's.
	Telemetry *telemetry.Telemetry
}

// Serve runs the approver service until ctx ends.
func Serve(ctx context.Context, o Options) error {
	if o.NATSURL == "" {
		o.NATSURL = "nats://127.0.0.1:4222"
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:8470"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.DataDir == "" {
		state, err := identity.StateDir()
		if err != nil {
			return err
		}
		o.DataDir = filepath.Join(state, "approver")
		if fi, err := os.Stat(filepath.Join(".toolgate", "approver")); err == nil && fi.IsDir() {
			fmt.Fprintf(o.Out, "approver: ./.toolgate/approver is no longer used and was left alone: its state lives in %s\n", o.DataDir)
		}
	}
	if o.TokenFile == "" {
		o.TokenFile = filepath.Join(o.DataDir, "tokens")
		who := os.Getenv("USER")
		if who == "" {
			who = "admin"
		}
		created, err := EnsureTokenFile(o.TokenFile, who)
		if err != nil {
			return err
		}
		if created {
			fmt.Fprintf(o.Out, "approver: created %s with a login token for %q (add a line per person)\n", o.TokenFile, who)
		}
	}
	tokens, err := LoadTokens(o.TokenFile)
	if err != nil {
		return err
	}
	tel := o.Telemetry
	if tel == nil {
		if tel, err = telemetry.Setup(ctx, telemetry.Options{Service: telemetry.ServiceApprover, Prometheus: o.MetricsListen != ""}); err != nil {
			return err
		}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	secure, err := ParseSecureCookie(o.SecureCookie)
	if err != nil {
		return err
	}
	cfg := Config{Name: o.Name, Tokens: tokens, Logger: o.Logger, Telemetry: tel, SecureCookie: secure, TrustedProxies: o.TrustedProxies}
	secret := func(path, what string) (string, error) {
		if path == "" {
			return "", nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", fmt.Errorf("%s: %s is empty", what, path)
		}
		return s, nil
	}
	hookSecret, err := secret(o.WebhookSecretFile, "webhook secret")
	if err != nil {
		return err
	}
	for _, u := range o.Webhooks {
		cfg.Webhooks = append(cfg.Webhooks, Webhook{URL: u, Format: FormatJSON, Secret: hookSecret})
	}
	for _, u := range o.SlackWebhooks {
		cfg.Webhooks = append(cfg.Webhooks, Webhook{URL: u, Format: FormatSlack})
	}
	if cfg.SlackSigningSecret, err = secret(o.SlackSigningSecretFile, "slack signing secret"); err != nil {
		return err
	}
	if o.SlackUsersFile != "" {
		if cfg.SlackUsers, err = loadPairs(o.SlackUsersFile); err != nil {
			return err
		}
	}

	// Listen first: a taken port is said at once, not after NATS is found.
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (another approver running? choose another address with --listen): %w", o.Listen, err)
	}
	defer ln.Close()
	rch := newReach(identity.RedactURL(o.NATSURL), o.Logger)
	nc, creds, err := identity.Dial(o.NATSURL, o.Creds, identity.RoleApprover, "approver",
		append(rch.options(), nats.Name("toolgate-approver"))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	signer, err := signingKey(o, creds)
	if err != nil {
		return err
	}
	cfg.Key, cfg.UserJWT = signer.Key, signer.JWT
	if err := rch.wait(ctx, nc); err != nil {
		return nil // stopped before NATS came up
	}
	if creds != nil {
		fmt.Fprintf(o.Out, "approver: connected to NATS as %s (account %s)\n", creds, creds.Account)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// Approvers read the bus; workers create it.
	if err := bus.WaitProvisioned(ctx, js, o.Logger, bus.StreamApprovals, "KV_"+bus.BucketApprovals); err != nil {
		return fmt.Errorf("the bus at %s: %w", identity.RedactURL(o.NATSURL), err)
	}
	if o.PublicURL == "" {
		o.PublicURL = "http://" + ln.Addr().String()
	}
	cfg.PublicURL = o.PublicURL
	srv, err := New(ctx, nc, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	var serving atomic.Bool // taking decisions: not while starting or stopping
	if o.MetricsListen != "" {
		mctx, stopMetrics := context.WithCancel(context.Background())
		defer stopMetrics()
		ready := func() error {
			if !serving.Load() {
				return errors.New("starting or stopping")
			}
			return srv.Ready()
		}
		addr, err := telemetry.Serve(mctx, o.MetricsListen, telemetry.Endpoints(tel.Prometheus, ready))
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "approver: metrics, health and readiness on http://%s\n", addr)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.Run(ctx) }()
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	fmt.Fprintf(o.Out, "approver: page and API at %s (NATS %s)\napprover: signing key %s (data in %s)\n",
		o.PublicURL, identity.RedactURL(o.NATSURL), srv.PublicKey(), o.DataDir)
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	serving.Store(true)
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil {
			return err
		}
	}
	serving.Store(false)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx) // open event streams end with the timeout
	return nil
}

// signingKey is the key decisions are signed with: the credentials the
// approver connected with, else (a password URL) approver.nk in the data
// directory, a key the workers must pin.
func signingKey(o Options, creds *identity.Creds) (trust.Signer, error) {
	if creds != nil {
		return trust.SignerOf(creds), nil
	}
	key, err := LoadOrCreateKey(o.DataDir)
	if err != nil {
		return trust.Signer{}, err
	}
	return trust.Signer{Key: key}, nil
}

// loadPairs reads `<identity> <value>` lines into value → identity.
func loadPairs(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("slack users: %w", err)
	}
	out := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("slack users: %s:%d: want `<identity> <slack user id>`", path, n+1)
		}
		out[f[1]] = f[0]
	}
	return out, nil
}
