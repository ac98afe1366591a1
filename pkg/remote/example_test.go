package remote_test

import (
	"context"
	"encoding/json"
	"log"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/remote"
)

// A tool served from its own process: workers on the same NATS find it,
// validate its arguments, judge its calls by policy and route them here.
func ExampleServe() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	svc, err := remote.Serve(nc, remote.Tool{
		Name:        "upper",
		Description: "Upper-case a text.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Kind:        "read",
	}, func(ctx context.Context, r *remote.Request) (*remote.Result, error) {
		var a struct{ Text string }
		if err := json.Unmarshal(r.Arguments, &a); err != nil {
			return nil, err
		}
		return &remote.Result{Content: strings.ToUpper(a.Text)}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Stop()
	select {} // serve until the process ends
}
