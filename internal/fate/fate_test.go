package fate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// consumerState is what the server says of the consumer after a fate was
// applied to its one message.
type consumerState struct {
	ackPending  int    // delivered and not yet settled
	pending     uint64 // not yet delivered
	ackFloor    uint64 // consumer sequence of the last settled message
	redelivered int
}

// TestFates applies each fate to a message a real consumer delivered and
// checks what the server then says of the message: its ack floor and
// pending counts in the consumer info, a redelivery and its delivery count
// for a retry, the terminated advisory and its reason for a term.
func TestFates(t *testing.T) {
	s := testenv.StartNATS(t, "")
	nc, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FATES", Subjects: []string{"fates.>"}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		fate fate.Fate
		want consumerState
		// redelivered: the message comes again, delivered twice.
		redelivered bool
		// termReason: the server announces the term with this reason.
		termReason string
	}{
		{name: "ack", fate: fate.Ack(), want: consumerState{ackFloor: 1}},
		{name: "retry", fate: fate.Retry(50*time.Millisecond, errors.New("bucket busy")), redelivered: true},
		{name: "retry without delay", fate: fate.Retry(0, nil), redelivered: true},
		{name: "term", fate: fate.Term("unreadable"), want: consumerState{ackFloor: 1}, termReason: "unreadable"},
		{name: "leave", fate: fate.Leave("owner alive"), want: consumerState{ackPending: 1}},
		{name: "unknown kind fails safe", fate: fate.Fate{Kind: 99}, redelivered: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			durable := fmt.Sprintf("c%d", i)
			subject := "fates." + durable
			cons, err := js.CreateConsumer(ctx, "FATES", jetstream.ConsumerConfig{Durable: durable, FilterSubject: subject,
				AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour, MaxDeliver: 5})
			if err != nil {
				t.Fatal(err)
			}
			terms, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.FATES." + durable)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, subject, []byte("call")); err != nil {
				t.Fatal(err)
			}
			var counted []fate.Fate
			r := fate.Runner{Consumer: durable, Count: func(c string, f fate.Fate) {
				if c == durable {
					counted = append(counted, f)
				}
			}}
			m := fetch(ctx, t, cons)
			first, _ := m.Metadata()
			var seen string
			r.Run(ctx, m, func(_ context.Context, m fate.Message) fate.Fate {
				seen = string(m.Data())
				return tt.fate
			})
			if seen != "call" {
				t.Fatalf("handler saw %q", seen)
			}
			if len(counted) != 1 || counted[0].Kind != tt.fate.Kind {
				t.Fatalf("counted %v, want [%v]", counted, tt.fate)
			}
			if tt.redelivered {
				again := fetch(ctx, t, cons)
				md, _ := again.Metadata()
				if md.NumDelivered != 2 || md.Sequence.Stream != first.Sequence.Stream {
					t.Fatalf("redelivery: delivered %d times, stream seq %d", md.NumDelivered, md.Sequence.Stream)
				}
				_ = r.Settle(again, fate.Ack())
				tt.want = consumerState{ackFloor: 2, redelivered: 0}
			}
			if tt.termReason != "" {
				adv, err := terms.NextMsg(10 * time.Second)
				if err != nil {
					t.Fatalf("no terminated advisory: %v", err)
				}
				var a struct {
					Reason    string `json:"reason"`
					StreamSeq uint64 `json:"stream_seq"`
				}
				if err := json.Unmarshal(adv.Data, &a); err != nil || a.Reason != tt.termReason || a.StreamSeq != first.Sequence.Stream {
					t.Fatalf("terminated advisory = %s (%v), want reason %q", adv.Data, err, tt.termReason)
				}
			}
			got := state(ctx, t, cons, tt.want)
			if got != tt.want {
				t.Fatalf("consumer = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func fetch(ctx context.Context, t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	t.Fatalf("nothing delivered: %v", b.Error())
	return nil
}

// state reads the consumer's info until it shows want (an ack travels to
// the server on its own, unconfirmed) or 5 seconds passed, and returns
// the last one read.
func state(ctx context.Context, t *testing.T, cons jetstream.Consumer, want consumerState) consumerState {
	t.Helper()
	var got consumerState
	for deadline := time.Now().Add(5 * time.Second); ; {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = consumerState{ackPending: info.NumAckPending, pending: info.NumPending,
			ackFloor: info.AckFloor.Consumer, redelivered: info.NumRedelivered}
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSettleTwice: a second settlement of one message fails and is
// reported, without changing the first.
func TestSettleTwice(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TWICE", Subjects: []string{"twice"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "TWICE", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "twice", nil); err != nil {
		t.Fatal(err)
	}
	m := fetch(ctx, t, cons)
	var r fate.Runner
	if err := r.Settle(m, fate.Ack()); err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(m, fate.Retry(0, nil)); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) && !errors.Is(err, nats.ErrMsgAlreadyAckd) {
		t.Fatalf("second settlement: err = %v, want already acked", err)
	}
	if got := state(ctx, t, cons, consumerState{ackFloor: 1}); got != (consumerState{ackFloor: 1}) {
		t.Fatalf("consumer = %+v", got)
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		delivered uint64
		want      time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{5, 16 * time.Second}, {6, 30 * time.Second}, {100, 30 * time.Second},
	}
	for _, tt := range tests {
		if got := fate.Backoff(tt.delivered); got != tt.want {
			t.Errorf("Backoff(%d) = %s, want %s", tt.delivered, got, tt.want)
		}
	}
}
