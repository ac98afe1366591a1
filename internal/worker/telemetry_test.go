package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	mnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// TestReadyOnlyWhileTakingCalls: /readyz's answer is not ready before the
// consumer is bound, ready while taking calls, and not ready while
// draining, with a call still running.
func TestReadyOnlyWhileTakingCalls(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	started := make(chan string, 1)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := New(nc, tools.NewPipeline(testRegistry(t, &ctr, started)),
		signing(t, Config{Bus: fastBus, ShutdownGrace: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "provisioning") {
		t.Fatalf("before Run: %v", err)
	}
	ready := make(chan struct{})
	w.OnReady(func() { close(ready) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testenv.Recv(t, ready, "ready")
	if err := w.Ready(); err != nil {
		t.Fatalf("taking calls: %v", err)
	}
	c, _ := newClient(t, s, "ready")
	if _, err := c.Submit(ctxT(t), "sleep", map[string]any{"ms": 3000}); err != nil {
		t.Fatal(err)
	}
	testenv.Recv(t, started, "started")
	cancel()
	for end := time.Now().Add(30 * time.Second); ; {
		err := w.Ready()
		if err != nil && strings.Contains(err.Error(), "draining") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after the stop signal: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a call still running", err)
	default:
	}
	if err := testenv.Recv(t, done, "done"); err != nil {
		t.Fatal(err)
	}
	if calls, runs := ctr.total(); calls != 1 || runs != 1 {
		t.Fatalf("%d calls ran %d times, want the one call finished once", calls, runs)
	}
}

// TestSpansContinueTheCallsTraceInEveryMode: the trace context of a call
// is found in a binary call's ce-traceparent header in any case, and in a
// structured call's JSON; the result carries it back; arguments and
// results reach spans only when opted in.
func TestSpansContinueTheCallsTraceInEveryMode(t *testing.T) {
	s := testenv.StartNATS(t, "")
	exp := tracetest.NewInMemoryExporter()
	tel := telemetry.New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), mnoop.NewMeterProvider(), nil)
	tel.CaptureContent = true
	var ctr counter
	startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus, Telemetry: tel})
	nc, js := s.Connect(t)
	cases := []struct {
		id     string
		mode   events.Mode
		header string
	}{
		{"tm-binary", events.Binary, "ce-traceparent"},
		{"tm-upper", events.Binary, "CE-TRACEPARENT"},
		{"tm-mixed", events.Binary, "Ce-Traceparent"},
		{"tm-structured", events.Structured, ""},
		{"tm-bare", events.StructuredBare, ""},
	}
	for i, tc := range cases {
		tp := fmt.Sprintf("00-%032x-%016x-01", i+1, i+100)
		ev, _ := events.NewCall(tc.id, "tracer", events.CallData{Arguments: json.RawMessage(`{"text":"secret-ish"}`), SessionID: "sess"})
		if tc.mode != events.Binary {
			ev.SetExtension("traceparent", tp)
		}
		m, err := events.Encode(events.CallSubject("tracer", "echo"), ev, tc.mode)
		if err != nil {
			t.Fatal(err)
		}
		if tc.mode == events.Binary {
			m.Header[tc.header] = []string{tp}
		}
		sub, _ := nc.SubscribeSync(events.ResultSubject("tracer", tc.id))
		if _, err := js.PublishMsg(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
		r, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		rev, _, err := events.Decode(r.Header, r.Data)
		if err != nil || rev.Extensions()["traceparent"] != tp {
			t.Errorf("%s: result traceparent %v (%v), want %s", tc.id, rev.Extensions()["traceparent"], err, tp)
		}
		want := fmt.Sprintf("%032x", i+1)
		var execute, process tracetest.SpanStub
		for end := time.Now().Add(30 * time.Second); execute.Name == "" || process.Name == ""; {
			for _, sp := range exp.GetSpans() {
				if sp.SpanContext.TraceID().String() != want {
					continue
				}
				switch sp.Name {
				case "execute_tool echo":
					execute = sp
				case spanProcessCall:
					process = sp
				}
			}
			if time.Now().After(end) {
				t.Fatalf("%s: no spans in trace %s", tc.id, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if process.Parent.SpanID().String() != fmt.Sprintf("%016x", i+100) || !process.Parent.IsRemote() {
			t.Errorf("%s: process span's parent %v", tc.id, process.Parent)
		}
		got := map[string]string{}
		for _, kv := range execute.Attributes {
			got[string(kv.Key)] = kv.Value.String()
		}
		if got["gen_ai.tool.call.arguments"] != `{"text":"secret-ish"}` || got["gen_ai.tool.call.result"] != "secret-ish" ||
			got["gen_ai.conversation.id"] != "sess" {
			t.Errorf("%s: execute_tool attributes %v", tc.id, got)
		}
	}
}

// TestSandboxFailedIsTheSandboxsNotTheCommands: a command that could not
// be started, or bubblewrap's own set-up failure, counts; a command that
// failed on its own, a timeout or bad arguments do not.
func TestSandboxFailedIsTheSandboxsNotTheCommands(t *testing.T) {
	startErr := fmt.Errorf("run: %w", bash.ErrStart)
	for _, tc := range []struct {
		name string
		md   map[string]any
		err  error
		want bool
	}{
		{"could not start", nil, startErr, true},
		{"bwrap set-up failed", map[string]any{"sandbox": "bwrap", "exit_code": 1, "stderr": "bwrap: Creating new namespace failed: Operation not permitted"}, nil, true},
		{"the command failed", map[string]any{"sandbox": "bwrap", "exit_code": 1, "stderr": "ls: cannot access 'x'"}, nil, false},
		{"exit 2 naming bwrap", map[string]any{"sandbox": "bwrap", "exit_code": 2, "stderr": "bwrap: x"}, nil, false},
		{"no sandbox", map[string]any{"sandbox": "none", "exit_code": 1, "stderr": "bwrap: x"}, nil, false},
		{"timeout", nil, tools.ErrTimeout, false},
		{"bad arguments", nil, errors.New("cwd: not a directory"), false},
	} {
		if got := sandboxFailed(&events.ResultData{Metadata: tc.md}, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
