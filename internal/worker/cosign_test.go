package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// TestOneSignaturePerCall counts the ed25519 signatures a call's stored
// events carry: a final call's result and its audit events (the execution
// event, and the decision event when it does not fold into it) are
// signed with ONE signature, each event still verifying on its own - in
// binary and in structured mode, allowed, denied, and asked on a worker
// without approvals (two audit events).
func TestOneSignaturePerCall(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	gate := textGate()
	rw := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus}, tools.WithGate(gate))
	binary, nc := newClient(t, s, "signs")
	structured, _ := newClient(t, s, "signs", client.WithMode(events.Structured))
	js, _ := jetstream.New(nc)
	cases := []struct {
		id, text string
		c        *client.Client
		audits   int
	}{
		{"s-allow", "hi", binary, 1},
		{"s-deny", "deny", binary, 1},
		{"s-ask", "ask", binary, 2},
		{"s-structured", "hi", structured, 1},
		{"s-structured-ask", "ask", structured, 2},
	}
	for _, tc := range cases {
		if _, err := tc.c.Call(ctxT(t), "echo", map[string]any{"text": tc.text}, client.WithID(tc.id)); err != nil {
			t.Fatal(err) // the client verified the result
		}
	}
	if err := rw.stop(); err != nil {
		t.Fatal(err)
	}
	_, verify, _ := testenv.WorkerSigning(t)
	sigs := map[string]map[string]bool{} // by call: the ed25519 signatures its events carry
	events1 := map[string]int{}
	note := func(callID, sig string) {
		if sigs[callID] == nil {
			sigs[callID] = map[string]bool{}
		}
		raw, _, _ := strings.Cut(sig, ".") // the co-signed form's first part
		sigs[callID][raw] = true
		events1[callID]++
	}
	results, err := js.Stream(ctxT(t), bus.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		m, err := results.GetLastMsgForSubject(ctxT(t), events.ResultSubject("signs", tc.id))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify.Result(m.Header, m.Data, "signs", tc.id, "echo"); err != nil {
			t.Fatalf("%s: result: %v", tc.id, err)
		}
		ev, _, err := events.Decode(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		sig, _ := events.Signature(ev)
		note(tc.id, sig)
	}
	cons, err := js.OrderedConsumer(ctxT(t), bus.StreamAudit, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AuditSubject("signs", ">")}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			break // all read
		}
		ev, a, err := verify.Audit(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("audit event: %v", err)
		}
		sig, _ := events.Signature(ev)
		note(a.CallID, sig)
	}
	for _, tc := range cases {
		if events1[tc.id] != 1+tc.audits || len(sigs[tc.id]) != 1 {
			t.Errorf("%s: %d events (want %d) carry %d signatures, want 1", tc.id, events1[tc.id], 1+tc.audits, len(sigs[tc.id]))
		}
	}
}
