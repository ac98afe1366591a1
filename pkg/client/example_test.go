package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/trust"
)

// startWorker runs an embedded server and a worker with one tool, as
// `go run ./cmd/worker` does with the built-in tools.
// It also writes agent-7's credentials, as `toolctl creds agent agent-7`
// prints them, to creds.
func startWorker() (url, creds string, stop func()) {
	dir, _ := os.MkdirTemp("", "toolgate-example-")
	in, err := identity.LoadOrCreate(filepath.Join(dir, "keys"))
	if err != nil {
		panic(err)
	}
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:0", DataDir: dir, Install: in})
	if err != nil {
		panic(err)
	}
	wcreds, _ := in.MintCreds(identity.RoleWorker, "worker")
	agent, _ := in.Mint(identity.RoleAgent, "agent-7")
	creds = filepath.Join(dir, "agent-7.creds")
	_ = os.WriteFile(creds, agent, 0o600)
	reg := tools.NewRegistry()
	reg.MustRegister(&tools.Tool{
		Name: "upper", Description: "Upper-cases text.", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Handler: tools.HandlerFunc(func(_ context.Context, c *tools.Call) (*tools.Output, error) {
			s := []rune(c.Args["text"].(string))
			for i, r := range s {
				if r >= 'a' && r <= 'z' {
					s[i] = r - 'a' + 'A'
				}
			}
			return &tools.Output{Content: string(s)}, nil
		}),
	})
	wnc, _ := nats.Connect(srv.ClientURL(), wcreds.NATSOptions()...)
	w, _ := worker.New(wnc, tools.NewPipeline(reg), worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Signer: trust.Signer{Key: wcreds.Key, JWT: wcreds.JWT}}) // it signs its results
	ready := make(chan struct{})
	w.OnReady(func() { close(ready) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	<-ready
	return srv.ClientURL(), creds, func() { cancel(); <-done; wnc.Close(); srv.Close(); os.RemoveAll(dir) }
}

func ExampleClient_Call() {
	url, creds, stop := startWorker()
	defer stop()

	// The agent's credentials name it and set its inbox prefix.
	agent, opts, err := client.Credentials(creds)
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	// Results count when a worker of the credentials' account signed them.
	c, err := client.New(nc, agent, client.WithCredsTrust(creds))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := c.Call(ctx, "upper", map[string]any{"text": "hello"})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Output)

	res, _ = c.Call(ctx, "upper", map[string]any{"text": 42})
	fmt.Println(res.Status, res.Error, res.Output)

	// A result that arrived while nobody listened is still there.
	id, _ := c.Submit(ctx, "upper", map[string]any{"text": "later"})
	time.Sleep(200 * time.Millisecond)
	res, _ = c.Wait(ctx, id)
	fmt.Println(res.Status, res.Output)
	// Output:
	// ok HELLO
	// error invalid_arguments invalid arguments for upper: text: expected string, but got number
	// ok LATER
}
