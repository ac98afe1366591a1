package bus_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestMaxPayloadBoundsTheCallsStream proves the payload bound is the
// stream's: a call over it is refused when published (never stored), one
// at the bound with its headers is stored, and provisioning again with
// another bound changes the stream.
func TestMaxPayloadBoundsTheCallsStream(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const limit = 4096
	if err := bus.Provision(ctx, js, bus.Config{MaxPayload: limit}); err != nil {
		t.Fatal(err)
	}
	publish := func(id string, size int) error {
		ev, err := events.NewCall(id, "a1", events.CallData{})
		if err != nil {
			t.Fatal(err)
		}
		ev.SetExtension("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		m, err := events.Encode(events.CallSubject("a1", "echo"), ev, events.Binary)
		if err != nil {
			t.Fatal(err)
		}
		m.Data = bytes.Repeat([]byte(" "), size) // data of exactly size bytes
		_, err = js.PublishMsg(ctx, m)
		return err
	}
	for _, c := range []struct {
		name   string
		size   int
		stored bool
	}{
		{"well under", 100, true},
		{"at the bound", limit, true},
		{"over the bound with its headers", limit + bus.CallHeaderAllowance, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := publish(nats.NewInbox()[7:], c.size)
			if c.stored && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.stored && err == nil {
				t.Fatal("stored a call over the bound")
			}
		})
	}
	if err := bus.Provision(ctx, js, bus.Config{MaxPayload: 2 * limit}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CachedInfo().Config.MaxMsgSize, int32(2*limit+bus.CallHeaderAllowance); got != want {
		t.Fatalf("calls stream max message size %d after provisioning again, want %d", got, want)
	}
}

// TestProvisionChangesOnlyWhatDiffers counts the JetStream API requests
// that create or update something: a first Provision creates every
// stream, consumer and bucket; a second with the same Config sends none;
// one with another ack wait updates the workers consumer alone.
func TestProvisionChangesOnlyWhatDiffers(t *testing.T) {
	s := testenv.StartNATS(t, "")
	nc, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var changes []string
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		for _, verb := range []string{".CREATE.", ".UPDATE."} {
			if strings.Contains(m.Subject, verb) {
				mu.Lock()
				changes = append(changes, m.Subject)
				mu.Unlock()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	changed := func() []string {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		out := changes
		changes = nil
		return out
	}
	c := bus.Config{}
	if err := bus.Provision(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	if got, want := len(changed()), len(c.Streams())+2+7; got != want {
		t.Fatalf("a fresh bus: %d creations, want %d (streams, consumers, buckets)", got, want)
	}
	if err := bus.Provision(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	if got := changed(); len(got) != 0 {
		t.Fatalf("provisioning again changed %q", got)
	}
	c.AckWait = time.Minute
	if err := bus.Provision(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	got := changed()
	if len(got) != 1 || !strings.Contains(got[0], bus.ConsumerWorkers) {
		t.Fatalf("another ack wait changed %q, want the workers consumer alone", got)
	}
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil || cons.CachedInfo().Config.AckWait != time.Minute {
		t.Fatalf("ack wait not applied: %v", err)
	}
}
