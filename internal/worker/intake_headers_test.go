package worker

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestStreamHeadersRefused: every Nats-* and Toolgate-* header of an
// agent's message, in any case, is refused with an error naming it, but
// the message id and the server's own request info; other headers pass.
func TestStreamHeadersRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    nats.Header
		bad  bool
	}{
		{"none", nil, false},
		{"message id", nats.Header{"Nats-Msg-Id": {"x"}}, false},
		{"request info", nats.Header{"Nats-Request-Info": {"{}"}}, false},
		{"cloudevents and trace", nats.Header{"ce-id": {"x"}, "traceparent": {"00-"}, "content-type": {"application/json"}}, false},
		{"schedule", nats.Header{"Nats-Schedule": {"@every 1s"}}, true},
		{"schedule target", nats.Header{"Nats-Schedule-Target": {"toolgate.call.bob.read"}}, true},
		{"scheduler", nats.Header{"Nats-Scheduler": {"toolgate.call_wait.bob.1"}}, true},
		{"schedule next", nats.Header{"Nats-Schedule-Next": {"purge"}}, true},
		{"roll-up", nats.Header{"Nats-Rollup": {"all"}}, true},
		{"ttl", nats.Header{"Nats-TTL": {"1s"}}, true},
		{"expectation", nats.Header{"Nats-Expected-Stream": {"TOOLGATE_CALLS"}}, true},
		{"batch", nats.Header{"Nats-Batch-Id": {"b"}}, true},
		{"counter", nats.Header{"Nats-Incr": {"1"}}, true},
		{"lower case", nats.Header{"nats-rollup": {"all"}}, true},
		{"mixed case message id", nats.Header{"NATS-MSG-ID": {"bob.x"}}, true},
		{"requeues", nats.Header{HeaderRequeues: {"1"}}, true},
		{"queued id", nats.Header{HeaderQueuedID: {"bob.x"}}, true},
		{"workers' mark in lower case", nats.Header{"toolgate-queued-id": {"bob.x"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := streamHeaders(tc.h)
			if got := errors.Is(err, ErrStreamHeader); got != tc.bad {
				t.Fatalf("streamHeaders(%v) = %v, want refused %v", tc.h, err, tc.bad)
			}
		})
	}
}

// BenchmarkStreamHeaders is the intake's check of one call's headers as
// an agent's client sends them (binary mode, traced).
func BenchmarkStreamHeaders(b *testing.B) {
	h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"c1"}, "ce-source": {"agent://alice"},
		"ce-type": {"dev.toolgate.call.requested.v1"}, "content-type": {"application/json"},
		"Nats-Msg-Id": {"c1"}, "ce-traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"Nats-Request-Info": {"{}"}}
	b.ReportAllocs()
	for b.Loop() {
		if err := streamHeaders(h); err != nil {
			b.Fatal(err)
		}
	}
}
