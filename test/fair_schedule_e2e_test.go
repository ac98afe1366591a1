package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
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
	if err := testenv.Recv(t, bobRead, "bob's read's end"); err != nil {
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

// TestFairFloodWaitsOutOfTheConsumer: one agent floods a worker of 2
// slots that runs one call per agent with ten times as many calls as
// the workers consumer lets be delivered unacknowledged (MaxAckPending,
// here 12 instead of 4096; the calls are bash calls that wait for a
// release). Its calls over its bounds wait as schedules of the calls
// stream, out of the consumer; then alice reads a file, queued behind
// the whole flood. Her read runs while no flood call has finished and at
// most one has started, after the server delivered each flood call ahead
// of her about once (at most a quarter more deliveries than calls). The
// gauge of scheduled calls counts them, and none went to the tail with a
// nak's requeue. Then every flood call runs exactly once and gets
// exactly one result. Before, each flood call over its bounds waited out
// two delayed naks unacknowledged, 12 at a time: the server delivered
// nobody else's call while they did, so alice's read waited for the
// whole flood to go back or to the tail, nine calls each 6 s, and ran
// out of her minute.
func TestFairFloodWaitsOutOfTheConsumer(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	const slots, maxAckPending, total = 2, 12, 120
	p, metrics, js := startFairWorker(t, slots, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.MaxAckPending = maxAckPending
	if _, err := js.UpdateConsumer(ctx, bus.StreamCalls, cfg); err != nil {
		t.Fatal(err)
	}

	results := make(chan floodResult, total)
	flood(ctx, t, p.client(t, "flood"), "flood", total, results)
	eventually(t, "the flood queued", func() (bool, string) {
		st, err := js.Stream(ctx, bus.StreamCalls)
		if err != nil {
			return false, err.Error()
		}
		return st.CachedInfo().State.LastSeq >= total, fmt.Sprint(st.CachedInfo().State)
	})

	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	r, err := p.client(t, "alice").Call(rctx, "read", map[string]any{"path": "README.md"})
	ran := floodRuns(t, p.ws)
	info, ierr := cons.Info(ctx)
	if ierr != nil {
		t.Fatal(ierr)
	}
	if err != nil || r.Status != events.StatusOK {
		t.Fatalf("alice's read behind a flood ten times MaxAckPending: %+v, %v (%d flood calls started; %d deliveries, %d delivered unacked, %d undelivered)",
			r, err, len(ran), info.Delivered.Consumer, info.NumAckPending, info.NumPending)
	}
	if len(results) != 0 || len(ran) > 1 {
		t.Fatalf("when alice's read finished: %d flood calls finished (want 0), %d started (want at most 1)", len(results), len(ran))
	}
	t.Logf("alice's read ran after %d deliveries for %d flood calls and hers", info.Delivered.Consumer, total)
	if info.Delivered.Consumer > total+total/4+1 {
		t.Fatalf("when alice's read finished the server had made %d deliveries for %d flood calls and hers", info.Delivered.Consumer, total)
	}
	eventually(t, "the gauge counting the flood's scheduled calls", func() (bool, string) {
		n := gauge(t, metrics, "toolgate_calls_scheduled")
		return n > 0, fmt.Sprint(n)
	})
	if got := metricSum(t, metrics, "toolgate_agent_requests_refused_total", `bound="held_calls"`); got < total-3 {
		t.Errorf("%v flood calls counted as over their agent's bound, want at least %d", got, total-3)
	}
	if got := metricSum(t, metrics, "toolgate_agent_requests_refused_total", `bound="requeued"`); got != 0 {
		t.Errorf("%v flood calls requeued to the tail, want none (they wait as schedules)", got)
	}

	releaseFloods(ctx, t, p.ws, results, total)
}

// gauge reads the value of an unlabelled gauge from the worker's metrics
// at addr (-1 when it is not exported).
func gauge(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return n
		}
	}
	return -1
}
