package bus_test

import (
	"bytes"
	"context"
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
