// Command approver runs the approver service: the web page, JSON API and
// chat integration through which people approve, reject or answer parked
// tool calls. With no flags it joins the worker's embedded NATS server on
// this machine, creates its signing key and a login token under the state
// directory ($XDG_STATE_HOME/toolgate/approver), and serves on 127.0.0.1:8470.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/version"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var o approver.Options
	var hooks, slack list
	fs := flag.NewFlagSet("approver", flag.ExitOnError)
	def := os.Getenv("NATS_URL")
	if def == "" {
		def = "nats://127.0.0.1:4222"
	}
	fs.StringVar(&o.NATSURL, "nats", def, "NATS server or cluster URL (env NATS_URL)")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:8470", "HTTP address of the page and API")
	fs.StringVar(&o.TokenFile, "token-file", "", "file of `<identity> <token>` lines (default <data>/tokens, created with one token when missing)")
	fs.StringVar(&o.DataDir, "data", "", "directory of the signing key and token file (default $XDG_STATE_HOME/toolgate/approver; created on first start)")
	fs.StringVar(&o.Creds, "creds", os.Getenv("TOOLGATE_CREDS"), "approver credentials (.creds, role approver): it connects with them and signs decisions with their key (env TOOLGATE_CREDS; default minted from the state directory's keys)")
	fs.StringVar(&o.Name, "name", "", "service name in events (default host name)")
	fs.StringVar(&o.PublicURL, "public-url", "", "URL people reach the page at, for links in notifications (default http://<listen>)")
	fs.StringVar(&o.SecureCookie, "secure-cookie", approver.SecureCookieAuto, "mark the session cookie Secure: auto (when the request came over TLS, or through a trusted proxy saying https: X-Forwarded-Proto or Forwarded), always, never")
	proxies := fs.String("trusted-proxies", "", "comma-separated addresses and CIDR prefixes of the proxies whose X-Forwarded-Proto/Forwarded headers count (default loopback and private networks: 127.0.0.0/8,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7)")
	fs.Var(&hooks, "webhook", "URL notified of every approval request with signed JSON (repeatable)")
	fs.StringVar(&o.WebhookSecretFile, "webhook-secret-file", "", "file holding the HMAC-SHA256 secret of --webhook deliveries")
	fs.Var(&slack, "slack-webhook", "Slack incoming-webhook URL for messages with Approve/Reject buttons (repeatable)")
	fs.StringVar(&o.SlackSigningSecretFile, "slack-signing-secret-file", "", "file holding the Slack app's signing secret; enables POST /slack/actions")
	fs.StringVar(&o.SlackUsersFile, "slack-users", "", "file of `<identity> <slack user id>` lines: who may decide from Slack")
	fs.StringVar(&o.MetricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	showVersion := fs.Bool("version", false, "print the version, commit and build date, and exit")
	healthcheck := fs.String("healthcheck", "", "GET this URL (e.g. http://127.0.0.1:8470/healthz), exit 0 when it answers 200 and 1 otherwise: a container image's HEALTHCHECK")
	if slices.ContainsFunc(os.Args[1:], func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		fs.SetOutput(os.Stdout) // help asked for is the output, not an error
	}
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(version.Get().String("approver"))
		return
	}
	if *healthcheck != "" {
		if err := telemetry.Probe(*healthcheck); err != nil {
			fmt.Fprintln(os.Stderr, "approver: healthcheck:", err)
			os.Exit(1)
		}
		return
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "approver: unexpected argument %q (options are flags: approver --help)\n", fs.Arg(0))
		os.Exit(2)
	}
	logger, err := telemetry.NewLogger(*logFormat, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "approver: --log-format:", err)
		os.Exit(2)
	}
	o.Logger = logger
	o.Out = telemetry.Lines(*logFormat, os.Stdout, logger) // --log-format json: every line JSON
	o.Webhooks, o.SlackWebhooks = hooks, slack
	if *proxies != "" {
		if o.TrustedProxies, err = approver.ParseProxies(*proxies); err != nil {
			fmt.Fprintln(os.Stderr, "approver: --trusted-proxies:", err)
			os.Exit(2)
		}
	}
	if _, err := approver.ParseSecureCookie(o.SecureCookie); err != nil {
		fmt.Fprintln(os.Stderr, "approver: --secure-cookie:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := approver.Serve(ctx, o); err != nil {
		if *logFormat == "json" {
			logger.Error("approver stopped", "err", err)
		} else {
			fmt.Fprintln(os.Stderr, "approver:", err)
		}
		os.Exit(1)
	}
}
