// Package daemon wires a worker process from its options: the embedded or
// remote NATS server, the registry of built-in tools, the policy gate, and
// the worker loop. cmd/worker only parses flags and calls Run.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approval"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/worker"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
	"github.com/toolgate/toolgate/pkg/tools/shell"
)

// Options configure a worker process. The zero value of each field means
// its default.
type Options struct {
	// NATSURL connects to an existing server or cluster; empty starts the
	// embedded server.
	NATSURL string
	// Listen is where the embedded server listens; default 127.0.0.1:4222.
	Listen string
	// DataDir holds the embedded server's storage; default ./.toolgate.
	DataDir string
	// Workspace is the directory tools are confined to; default ".".
	Workspace string
	// SkillsDir holds SKILL.md files for the skill tool; default
	// <workspace>/.skills.
	SkillsDir string
	// Concurrency bounds calls run at once by this worker; default 16.
	Concurrency int
	// Name identifies the worker; default host-pid.
	Name string
	// MaxPayload bounds a call message in bytes; default 1 MiB.
	MaxPayload int
	// ShutdownGrace bounds how long running calls may finish on stop.
	ShutdownGrace time.Duration
	// Replicas for streams and buckets when provisioning a cluster.
	Replicas int
	// Sandbox is the bash tool's isolation: auto (default), require, off.
	Sandbox shell.Mode
	// TrustedApprovers are the nkey public keys whose approval decisions
	// this worker accepts. Empty trusts the keys approver services
	// registered in the approvals bucket (zero-config; logged loudly).
	TrustedApprovers []string
	// Logger receives logs; default a text logger on stderr.
	Logger *slog.Logger
	// Out receives the start-up banner; default stderr.
	Out io.Writer
	// Ready, if set, is called with the NATS URL once the worker takes
	// calls (tests and embedding programs use it).
	Ready func(natsURL string)
}

// Run runs a worker process until ctx is done, then shuts down cleanly.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.Out == nil {
		o.Out = os.Stderr
	}
	ws, err := workspace(o.Workspace)
	if err != nil {
		return err
	}
	sb, err := shell.Detect(o.Sandbox)
	if err != nil {
		return err // require without a working bubblewrap: refuse to start
	}
	if sb.Enabled() {
		fmt.Fprintf(o.Out, "toolgate: bash sandbox: %s\n", sb)
	} else {
		fmt.Fprintf(o.Out, "toolgate: WARNING: bash sandbox: %s; install bubblewrap (apt-get install -y bubblewrap) or run with --sandbox require to refuse this\n", sb)
	}
	url := o.NATSURL
	if url == "" {
		srv, err := embedded.Start(embedded.Config{Listen: o.Listen, DataDir: o.DataDir})
		if err != nil {
			return err
		}
		defer srv.Close()
		url = srv.ClientURL()
		fmt.Fprintf(o.Out, "toolgate: embedded NATS with JetStream listening on %s\n", url)
		fmt.Fprintf(o.Out, "toolgate: data in %s\n", srv.StoreDir())
	} else {
		fmt.Fprintf(o.Out, "toolgate: using NATS at %s\n", url)
	}
	nc, err := nats.Connect(url, nats.Name("toolgate-worker"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(false))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	defer nc.Close()

	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Config{Workspace: ws, SkillsDir: o.SkillsDir}); err != nil {
		return fmt.Errorf("register built-in tools: %w", err)
	}
	bash, err := shell.New(shell.Config{Workspace: ws, Sandbox: o.Sandbox, Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("bash tool: %w", err)
	}
	if err := reg.Register(bash); err != nil {
		return err
	}
	if err := reg.Register(papproval.ClarifyTool()); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	busCfg := bus.Config{Replicas: o.Replicas}
	if err := bus.Provision(ctx, js, busCfg); err != nil {
		return err
	}
	mgr, err := approval.NewManager(ctx, js, approval.Options{Name: o.Name, TrustedKeys: o.TrustedApprovers, Logger: o.Logger})
	if err != nil {
		return err
	}
	pipe := tools.NewPipeline(reg, tools.WithWorkspace(ws), tools.WithLogger(o.Logger))
	w, err := worker.New(nc, pipe, worker.Config{
		Name: o.Name, Concurrency: o.Concurrency, MaxPayload: o.MaxPayload, ShutdownGrace: o.ShutdownGrace,
		Bus: busCfg, Logger: o.Logger, Parker: worker.ManagerParker{M: mgr},
	})
	if err != nil {
		return err
	}
	mctx, mcancel := context.WithCancel(context.Background())
	mdone := make(chan error, 1)
	go func() { mdone <- mgr.Run(mctx, w.Resume) }()
	defer func() {
		mcancel()
		if err := <-mdone; err != nil {
			o.Logger.Error("approvals", "err", err)
		}
	}()
	fmt.Fprintf(o.Out, "toolgate: workspace %s; tools: %v\n", ws, reg.Names())
	if o.Ready != nil {
		w.OnReady(func() { o.Ready(url) })
	}
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func workspace(dir string) (string, error) {
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--workspace %q: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("--workspace %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("--workspace %q is not a directory", dir)
	}
	return abs, nil
}
