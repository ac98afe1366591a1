package parking

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// BenchmarkParkDecideResume measures one approval round trip on a real
// embedded server: park (KV create + request publish), a signed decision
// published to the stream, verified, recorded with compare-and-set, and
// the resume callback called.
func BenchmarkParkDecideResume(b *testing.B) {
	srv := testenv.StartNATS(b, "")
	_, js := srv.Connect(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		b.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	m, err := NewManager(ctx, js, Options{Name: "bench", TrustedKeys: []string{pub}, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	resumed := make(chan string, 1)
	go func() {
		_ = m.Run(ctx, func(_ context.Context, p *Parked, _ Outcome) error { resumed <- p.CallID; return nil })
	}()
	ask := ask
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("bench-%d", i)
		p := &Parked{CallID: id, Agent: "agent-1", Tool: "bash", Arguments: json.RawMessage(`{"command":"git push"}`), Decision: ask}
		if err := m.Park(ctx, p); err != nil {
			b.Fatal(err)
		}
		d := &approval.Decision{CallID: id, ArgsSHA256: p.ArgsSHA256, Outcome: approval.Approve, Approver: "alice"}
		if err := d.Sign(kp); err != nil {
			b.Fatal(err)
		}
		data, _ := json.Marshal(d)
		if _, err := js.PublishMsg(ctx, ceMsg(events.ApprovalDecisionSubject(id), "d-"+id, "toolgate://approver/bench", events.TypeApprovalDecided, data)); err != nil {
			b.Fatal(err)
		}
		select {
		case got := <-resumed:
			if got != id {
				b.Fatalf("resumed %s, want %s", got, id)
			}
		case <-time.After(30 * time.Second):
			b.Fatal("no resume")
		}
	}
}
