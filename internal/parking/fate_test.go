package parking

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// TestDecisionFates hands each kind of decision message, fetched from the
// real decisions consumer, to the decision handler, applies the fate it
// returns, and checks what the server then says of the message.
func TestDecisionFates(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := NewManager(ctx, e.js, Options{Name: "w1", TrustedKeys: []string{e.pub}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.resumes.Wait()
	defer cancel()
	cons, err := e.js.CreateOrUpdateConsumer(ctx, bus.StreamApprovals, DecisionsConsumer(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ask := policy.Decision{Action: policy.Ask, Reason: "pushes", Rule: "git.push"}
	p := e.park(m, "df-1", ask)
	other, _ := nkeys.CreateUser()

	tests := []struct {
		name    string
		publish func()
		kind    fate.Kind
		resumed bool // the call's resume was started
	}{
		{"unreadable", func() {
			msg := nats.NewMsg(events.ApprovalDecisionSubject("df-1"))
			msg.Data = []byte("approve please")
			if _, err := e.js.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}, fate.KindTerm, false},
		{"unsigned", func() { e.publish(e.decision(p, "alice", approval.Approve), nil) }, fate.KindTerm, false},
		{"signed by an untrusted key", func() { e.publish(e.decision(p, "alice", approval.Approve), other) }, fate.KindTerm, false},
		{"for no parked call", func() {
			d := e.decision(p, "alice", approval.Approve)
			d.CallID = "df-none"
			e.publish(d, e.kp)
		}, fate.KindTerm, false},
		{"for other arguments", func() {
			d := e.decision(p, "alice", approval.Approve)
			d.ArgsSHA256 = approval.ArgsHash(p.Agent, p.Tool, []byte(`{"command":"rm -rf /"}`))
			e.publish(d, e.kp)
		}, fate.KindAck, false},
		{"approved", func() { e.publish(e.decision(p, "alice", approval.Approve), e.kp) }, fate.KindAck, true},
		{"decided already", func() { e.publish(e.decision(p, "bob", approval.Reject), e.kp) }, fate.KindAck, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.publish()
			b, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var msg jetstream.Msg
			for msg = range b.Messages() {
			}
			if msg == nil {
				t.Fatalf("nothing delivered: %v", b.Error())
			}
			f := m.handleDecision(ctx, msg, e.resume)
			if f.Kind != tt.kind {
				t.Fatalf("fate = %v, want %v", f, tt.kind)
			}
			if err := m.runner.Settle(msg, f); err != nil {
				t.Fatal(err)
			}
			want := uint64(i + 1)
			info, err := cons.Info(ctx)
			for err == nil && info.AckFloor.Consumer < want {
				time.Sleep(10 * time.Millisecond) // the ack travels unconfirmed
				info, err = cons.Info(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.AckFloor.Consumer != want || info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
				t.Fatalf("consumer: ack floor %d (want %d), ack pending %d, redelivered %d, pending %d",
					info.AckFloor.Consumer, want, info.NumAckPending, info.NumRedelivered, info.NumPending)
			}
			if tt.resumed {
				if o := e.waitResumed("df-1"); o.Status != approval.Approved {
					t.Fatalf("resumed with %+v", o)
				}
			}
		})
	}
	if n := len(e.resumes("df-1")); n != 1 {
		t.Fatalf("resumed %d times, want 1", n)
	}
}
