// Command remote-tool-go serves the tool word_count to a toolgate fleet
// from its own process, as a NATS micro service. Workers discover it and
// agents call it like any tool. It connects with the credentials of a
// tool service named word_count, from --creds or $NATS_CREDS:
//
//	go run ./cmd/toolctl creds tool word_count --out word_count.creds
//	go run ./examples/remote-tool-go --nats nats://127.0.0.1:4222 --creds word_count.creds
//	go run ./cmd/toolctl call word_count text='one two three'
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/remote"
)

func main() {
	defaultURL := nats.DefaultURL
	if u := os.Getenv("NATS_URL"); u != "" {
		defaultURL = u
	}
	url := flag.String("nats", defaultURL, "NATS URL (default $NATS_URL, else "+nats.DefaultURL+")")
	creds := flag.String("creds", os.Getenv("NATS_CREDS"), "the tool service's NATS credentials file (default $NATS_CREDS)")
	flag.Parse()
	opts := []nats.Option{nats.Name("remote-tool-go")}
	if *creds != "" {
		opts = append(opts, nats.UserCredentials(*creds))
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	defer nc.Close()
	svc, err := remote.Serve(nc, remote.Tool{
		Name:        "word_count",
		Description: "Count the words of a text.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
		Kind:        "read",
	}, func(ctx context.Context, r *remote.Request) (*remote.Result, error) {
		var a struct{ Text string }
		if err := json.Unmarshal(r.Arguments, &a); err != nil {
			return nil, err
		}
		n := len(strings.Fields(a.Text))
		return &remote.Result{Content: fmt.Sprintf("%d words", n), Metadata: map[string]any{"words": n}}, nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "serving word_count; Ctrl-C stops")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	_ = svc.Stop()
}
