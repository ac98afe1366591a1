package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// startWorker runs an embedded server and a worker with one tool, as
// `go run ./cmd/worker` does with the built-in tools.
func startWorker() (url string, stop func()) {
	dir, _ := os.MkdirTemp("", "toolgate-example-")
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		panic(err)
	}
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
	wnc, _ := nats.Connect(srv.ClientURL())
	w, _ := worker.New(wnc, tools.NewPipeline(reg), worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ready := make(chan struct{})
	w.OnReady(func() { close(ready) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	<-ready
	return srv.ClientURL(), func() { cancel(); <-done; wnc.Close(); srv.Close(); os.RemoveAll(dir) }
}

func ExampleClient_Call() {
	url, stop := startWorker()
	defer stop()

	nc, err := nats.Connect(url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, "agent-7")
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
