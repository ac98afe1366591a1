package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tnoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

// parkRecorder is a Parker that keeps what it was asked to park, or fails.
type parkRecorder struct {
	mu     sync.Mutex
	parked map[string]*tools.Parked
	fail   error
}

func (p *parkRecorder) Park(_ context.Context, in *events.Call, _ *tools.Call, pk *tools.Parked) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	if p.parked == nil {
		p.parked = map[string]*tools.Parked{}
	}
	p.parked[in.ID] = pk
	return nil
}

func (p *parkRecorder) get(id string) *tools.Parked {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parked[id]
}

// openWorker returns a worker with the bus provisioned and its buckets
// open, as Run leaves them, but taking no calls: the test fetches them
// from the workers consumer and hands them to handle and settle.
func openWorker(t testing.TB, s *testenv.Server, cfg Config, opts ...tools.PipelineOption) *Worker {
	t.Helper()
	nc, _ := s.Connect(t)
	reg := testRegistry(t, &counter{}, nil)
	reg.MustRegister(approval.ClarifyTool())
	cfg.Bus = fastBus
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := New(nc, tools.NewPipeline(reg, opts...), signing(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.execCancel)
	ctx := ctxT(t)
	if err := bus.Provision(ctx, w.js, w.cfg.Bus); err != nil {
		t.Fatal(err)
	}
	if w.calls, err = w.js.KeyValue(ctx, bus.BucketCalls); err != nil {
		t.Fatal(err)
	}
	if w.results, err = w.js.Stream(ctx, bus.StreamResults); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestFateOfEachOutcome drives each kind of call outcome through the real
// workers consumer: the call is fetched from it, handled, and its fate
// applied; then the server's consumer info and the calls stream say what
// became of the message (settled and removed, or still pending), and the
// agent's result subject what the agent was told.
func TestFateOfEachOutcome(t *testing.T) {
	s := testenv.StartNATS(t, "")
	gate := policy.EvaluatorFunc(func(_ context.Context, req policy.Request) policy.Decision {
		switch req.Arguments["text"] {
		case "deny":
			return policy.Decision{Action: policy.Deny, Reason: "not this", Rule: "t.deny"}
		case "ask":
			return policy.Decision{Action: policy.Ask, Reason: "a person decides", Rule: "t.ask"}
		}
		return policy.Decision{Action: policy.Allow}
	})
	parker := &parkRecorder{}
	reader := sdkmetric.NewManualReader()
	tel := telemetry.New(tnoop.NewTracerProvider(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
	w := openWorker(t, s, Config{Name: "w1", Parker: parker, Telemetry: tel}, tools.WithGate(gate))
	bare := openWorker(t, s, Config{Name: "w2"}, tools.WithGate(gate)) // no approvals configured
	failing := openWorker(t, s, Config{Name: "w3", Parker: &parkRecorder{fail: errors.New("approvals bucket unavailable")}}, tools.WithGate(gate))
	nc, js := s.Connect(t)
	ctx := ctxT(t)
	cons, err := js.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	results, err := nc.SubscribeSync(events.ResultsOf("fates"))
	if err != nil {
		t.Fatal(err)
	}
	terms, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + bus.StreamCalls + "." + bus.ConsumerWorkers)
	if err != nil {
		t.Fatal(err)
	}
	call := func(id, tool, args string) *nats.Msg {
		ev, _ := events.NewCall(id, "fates", events.CallData{Arguments: json.RawMessage(args)})
		b, _ := json.Marshal(ev)
		return &nats.Msg{Subject: events.CallSubject("fates", tool), Data: b}
	}
	// claimed puts a running claim record for id, heartbeating at beat.
	claimed := func(id string, beat time.Time) func(t *testing.T) {
		return func(t *testing.T) {
			rec, _ := json.Marshal(record{State: stateRunning, Worker: "elsewhere", Started: beat, Heartbeat: beat})
			if _, err := w.calls.Create(ctx, CallKey("fates", id), rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	// cancelledQueued records id as cancelled before any worker claimed
	// it, as a cancellation does for a queued call.
	cancelledQueued := func(id string) func(t *testing.T) {
		return func(t *testing.T) {
			rec, _ := json.Marshal(record{State: stateCancelled, Worker: "elsewhere", Started: time.Now(), Heartbeat: time.Now()})
			if _, err := w.calls.Create(ctx, CallKey("fates", id), rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	// cancelledSeen is the mark of a cancellation, as the worker's watch
	// of the cancels bucket has seen it.
	cancelledSeen := func(id string) func(t *testing.T) {
		return func(t *testing.T) { w.cx.mark(CallKey("fates", id)) }
	}

	tests := []struct {
		name   string
		w      *Worker
		before func(t *testing.T)
		msg    *nats.Msg
		kind   fate.Kind
		// status is the result the agent gets ("" for none).
		status events.Status
		// parked, when set, checks what was parked.
		parked func(pk *tools.Parked) bool
	}{
		{name: "ok", w: w, msg: call("f-ok", "echo", `{"text":"hi"}`), kind: fate.KindAck, status: events.StatusOK},
		{name: "tool error", w: w, msg: call("f-err", "fail", `{}`), kind: fate.KindAck, status: events.StatusError},
		{name: "denied", w: w, msg: call("f-deny", "echo", `{"text":"deny"}`), kind: fate.KindAck, status: events.StatusDenied},
		{name: "unknown tool", w: w, msg: call("f-unknown", "nosuch", `{}`), kind: fate.KindAck, status: events.StatusError},
		{name: "invalid arguments", w: w, msg: call("f-args", "echo", `{"text":7}`), kind: fate.KindAck, status: events.StatusError},
		{name: "unreadable", w: w, msg: &nats.Msg{Subject: events.CallSubject("fates", "echo"), Data: []byte("rm -rf /")},
			kind: fate.KindTerm, status: events.StatusError},
		{name: "asked: parked for approval", w: w, msg: call("f-ask", "echo", `{"text":"ask"}`), kind: fate.KindAck,
			status: events.StatusPending, parked: func(pk *tools.Parked) bool { return !pk.NeedsAnswer() && pk.Decision.Rule == "t.ask" }},
		{name: "clarify: parked for an answer", w: w, msg: call("f-clarify", "clarify", `{"question":"Which branch?"}`), kind: fate.KindAck,
			status: events.StatusPending, parked: func(pk *tools.Parked) bool { return pk.NeedsAnswer() && pk.Question.Text == "Which branch?" }},
		{name: "asked, no approvals configured", w: bare, msg: call("f-bare", "echo", `{"text":"ask"}`), kind: fate.KindAck, status: events.StatusDenied},
		{name: "clarify, no approvals configured", w: bare, msg: call("f-bare-q", "clarify", `{"question":"Which branch?"}`), kind: fate.KindAck, status: events.StatusError},
		{name: "asked, parking fails", w: failing, msg: call("f-parkfail", "echo", `{"text":"ask"}`), kind: fate.KindAck, status: events.StatusError},
		{name: "duplicate of a finished call", w: w, msg: call("f-ok", "echo", `{"text":"hi"}`), kind: fate.KindAck, status: events.StatusOK},
		{name: "duplicate of a parked call", w: w, msg: call("f-ask", "echo", `{"text":"ask"}`), kind: fate.KindAck, status: events.StatusPending},
		{name: "claimed by a live worker", w: w, before: claimed("f-live", time.Now()), msg: call("f-live", "echo", `{"text":"hi"}`), kind: fate.KindLeave},
		{name: "claimed by a worker that stopped", w: w, before: claimed("f-dead", time.Now().Add(-time.Hour)),
			msg: call("f-dead", "echo", `{"text":"hi"}`), kind: fate.KindAck, status: events.StatusInterrupted},
		{name: "cancelled while queued", w: w, before: cancelledQueued("f-cancel"), msg: call("f-cancel", "echo", `{"text":"hi"}`),
			kind: fate.KindAck, status: events.StatusCancelled},
		{name: "cancellation seen before the claim", w: w, before: cancelledSeen("f-cancel-seen"),
			msg: call("f-cancel-seen", "echo", `{"text":"hi"}`), kind: fate.KindAck, status: events.StatusCancelled},
		{name: "cancellation seen, would have been parked", w: w, before: cancelledSeen("f-cancel-ask"),
			msg: call("f-cancel-ask", "echo", `{"text":"ask"}`), kind: fate.KindAck, status: events.StatusCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			if _, err := js.PublishMsg(ctx, tt.msg); err != nil {
				t.Fatal(err)
			}
			b, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var m jetstream.Msg
			for m = range b.Messages() {
			}
			if m == nil {
				t.Fatalf("nothing delivered: %v", b.Error())
			}
			md, _ := m.Metadata()
			if md.NumDelivered != 1 {
				t.Fatalf("delivered %d times", md.NumDelivered)
			}
			f := tt.w.handle(jsMsg{m})
			if f.Kind != tt.kind {
				t.Fatalf("fate = %v, want %v", f, tt.kind)
			}
			tt.w.settle(jsMsg{m}, f)

			// What the server says of the message.
			info, err := cons.Info(ctx)
			for err == nil && info.NumAckPending > 0 && tt.kind != fate.KindLeave {
				time.Sleep(10 * time.Millisecond) // the ack travels unconfirmed
				info, err = cons.Info(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			wantPending := 0
			if tt.kind == fate.KindLeave {
				wantPending = 1
			}
			if info.NumAckPending != wantPending || info.NumPending != 0 || info.NumRedelivered != 0 {
				t.Fatalf("consumer: ack pending %d (want %d), pending %d, redelivered %d",
					info.NumAckPending, wantPending, info.NumPending, info.NumRedelivered)
			}
			st, err := js.Stream(ctx, bus.StreamCalls)
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.GetMsg(ctx, md.Sequence.Stream)
			if gone := errors.Is(err, jetstream.ErrMsgNotFound); gone != (tt.kind != fate.KindLeave) {
				t.Fatalf("call message removed from the queue = %v (%v), fate %v", gone, err, f)
			}
			if tt.kind == fate.KindLeave {
				if err := m.Ack(); err != nil { // the live owner's own ack, later
					t.Fatal(err)
				}
			}
			if tt.kind == fate.KindTerm {
				adv, err := terms.NextMsg(10 * time.Second)
				if err != nil {
					t.Fatalf("no terminated advisory: %v", err)
				}
				var a struct {
					Reason    string `json:"reason"`
					StreamSeq uint64 `json:"stream_seq"`
				}
				if err := json.Unmarshal(adv.Data, &a); err != nil || a.Reason != events.CodeInvalidEvent || a.StreamSeq != md.Sequence.Stream {
					t.Fatalf("terminated advisory = %s (%v)", adv.Data, err)
				}
			}

			// What the agent was told.
			if tt.status != "" {
				rm, err := results.NextMsg(10 * time.Second)
				if err != nil {
					t.Fatalf("no result: %v", err)
				}
				var r events.ResultData
				if _, err := events.DecodeData(rm.Header, rm.Data, &r); err != nil || r.Status != tt.status {
					t.Fatalf("result = %+v (%v), want status %s", r, err, tt.status)
				}
			}
			if tt.parked != nil {
				var ev struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal(tt.msg.Data, &ev)
				if pk := parker.get(ev.ID); pk == nil || !tt.parked(pk) {
					t.Fatalf("parked %s = %+v", ev.ID, pk)
				}
			}
		})
	}
	// Ran: echo, fail, and the clarify tool (which asks, and parks); a
	// duplicate, a denied, asked or refused call never runs.
	if n := w.Executions(); n != 3 {
		t.Errorf("executions = %d, want 3", n)
	}
	// w settled each of its messages once, counted by fate.
	want := map[fate.Kind]int64{}
	for _, tt := range tests {
		if tt.w == w {
			want[tt.kind]++
		}
	}
	for _, k := range []fate.Kind{fate.KindAck, fate.KindRetry, fate.KindTerm, fate.KindLeave} {
		got := counterValueWith(t, reader, "toolgate.messages.settled",
			attribute.String("consumer", bus.ConsumerWorkers), attribute.String("fate", k.String()))
		if got != want[k] {
			t.Errorf("toolgate.messages.settled{fate=%s} = %d, want %d", k, got, want[k])
		}
	}
}
