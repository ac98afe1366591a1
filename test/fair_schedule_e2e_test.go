package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestAttackStreamHeadersThroughTheIntake: the calls stream keeps message
// schedules (calls waiting out their agent's bounds), and so roll-ups.
// On a worker of one slot busy with her own call, mallory sends harmless
// reads of her own with the headers the server acts on: a schedule
// firing now onto bob's subject (once, repeated, in lower case), a
// roll-up, a TTL, an expectation. Each is refused with an error naming
// the header and nothing of hers is stored; once her call ends, bob's
// queued read runs and is the only call that ever runs as bob. Before,
// the schedules were stored and fired calls onto bob's subject that ran
// as bob.
func TestAttackStreamHeadersThroughTheIntake(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	p, _, js := startFairWorker(t, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mallory := dialAs(t, p.url, identity.RoleAgent, "mallory")
	admin := dialAs(t, p.url, identity.RoleAdmin, "admin")
	bobs := make(chan *nats.Msg, 16)
	if _, err := admin.ChanSubscribe(events.ResultsOf("bob"), bobs); err != nil {
		t.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	results := make(chan floodResult, 1)
	flood(ctx, t, p.client(t, "mallory"), "mallory", 1, results)
	eventually(t, "mallory's call running", func() (bool, string) { return len(floodRuns(t, p.ws)) == 1, "" })
	bobRead := make(chan error, 1)
	go func() {
		r, err := p.client(t, "bob").Call(ctx, "read", map[string]any{"path": "README.md"}, client.WithID("bobs-read"))
		if err == nil && r.Status != events.StatusOK {
			err = fmt.Errorf("bob's read: %+v", r)
		}
		bobRead <- err
	}()
	eventually(t, "bob's read queued", func() (bool, string) {
		_, undelivered, err := workersConsumer(ctx, js)
		return err == nil && undelivered == 1, fmt.Sprint(undelivered, err)
	})

	send := func(id, source, tool string, h nats.Header) *nats.Msg {
		t.Helper()
		ev, err := events.New(id, events.AgentSource(source), events.TypeCallRequested, map[string]any{"arguments": map[string]any{"path": "README.md"}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := events.Encode(events.CallSubject("mallory", tool), ev, events.Binary)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			m.Header[k] = v
		}
		r, err := mallory.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("mallory's %s: %v", id, err)
		}
		return r
	}
	now := time.Now().UTC().Format(time.RFC3339)
	bob := events.CallSubject("bob", "read")
	attacks := []struct {
		name, key, value string
		more             nats.Header
	}{
		{"schedule onto bob", "Nats-Schedule", "@at " + now, nats.Header{"Nats-Schedule-Target": {bob}}},
		{"repeat onto bob", "Nats-Schedule", "@every 1s", nats.Header{"Nats-Schedule-Target": {bob}}},
		{"lower case", "nats-schedule", "@at " + now, nats.Header{"nats-schedule-target": {bob}}},
		{"ttl", "Nats-TTL", "1s", nil},
		{"expectation", "Nats-Expected-Last-Sequence", "0", nil},
		{"roll-up", "Nats-Rollup", "sub", nil},
	}
	for i, a := range attacks {
		h := nats.Header{a.key: {a.value}}
		for k, v := range a.more {
			h[k] = v
		}
		// Each on a subject of its own: a schedule rolls up its subject.
		// Each forged as bob's, which it would be once fired onto his
		// subject (a call's source must name the agent its subject does).
		r := send("forged-"+strings.ReplaceAll(a.name, " ", "-"), "bob", fmt.Sprint("read", i), h)
		if !strings.Contains(string(r.Data), `"error"`) {
			t.Errorf("%s: stored (%s)", a.name, r.Data)
		} else if !strings.Contains(string(r.Data), a.key) {
			t.Errorf("%s: refused without naming the header %s: %s", a.name, a.key, r.Data)
		}
	}
	// Time for a stored schedule to fire (its time was now) before the
	// queue moves on: the calls on bob's subject it would add.
	stream, err := js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(bob))
		if err == nil && info.State.Subjects[bob] > 1 {
			break
		}
	}
	releaseFloods(ctx, t, p.ws, results, 1)
	if err := <-bobRead; err != nil {
		t.Fatal(err)
	}
	// Every call settled: what ran as bob is all on his result subject.
	until(t, time.Minute, func() bool {
		unacked, undelivered, err := workersConsumer(ctx, js)
		return err == nil && unacked == 0 && undelivered == 0
	})
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	for len(bobs) > 0 {
		if m := <-bobs; !strings.HasSuffix(m.Subject, ".bobs-read") {
			t.Errorf("a call ran as bob on mallory's headers: %s %s", m.Subject, m.Data)
		}
	}
}
