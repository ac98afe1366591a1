package remotesource

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/remote"
	"github.com/toolgate/toolgate/pkg/tools"
)

// rounds runs discovery on nc into reg and hands over the registered
// remote tools after every round.
func rounds(t *testing.T, nc *nats.Conn, reg *tools.Registry) <-chan []string {
	t.Helper()
	ch := make(chan []string, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Options{NC: nc, Registry: reg, Interval: 50 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnRound: func(names []string) {
				select {
				case ch <- names:
				default:
				}
			}})
	}()
	t.Cleanup(func() { cancel(); testenv.Recv(t, done, "done") })
	return ch
}

// until waits for a round whose registered tools satisfy ok.
func until(t *testing.T, ch <-chan []string, what string, ok func([]string) bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var last []string
	for {
		select {
		case names := <-ch:
			if ok(names) {
				return
			}
			last = names
		case <-deadline:
			t.Fatalf("never: %s; last round registered %v", what, last)
		}
	}
}

func has(name string) func([]string) bool {
	return func(ns []string) bool { return slices.Contains(ns, name) }
}

func call(t *testing.T, p *tools.Pipeline, name, args string) (*tools.Output, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.Handle(ctx, &tools.Call{ID: "c1", Agent: "agent-1", SessionID: "s1", Name: name, Arguments: json.RawMessage(args)})
}

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`

func TestRemoteToolLifecycle(t *testing.T) {
	srv := testenv.StartNATS(t, "")
	nc, _ := srv.Connect(t)
	svcConn, _ := srv.Connect(t)
	var got *remote.Request
	svc, err := remote.Serve(svcConn, remote.Tool{Name: "weather", Description: "Weather in a city.", Schema: json.RawMessage(weatherSchema), Kind: "network"},
		func(ctx context.Context, r *remote.Request) (*remote.Result, error) {
			got = r
			var a struct{ City string }
			_ = json.Unmarshal(r.Arguments, &a)
			if a.City == "Atlantis" {
				return nil, errors.New("no such city")
			}
			if _, ok := ctx.Deadline(); !ok {
				return &remote.Result{Content: "no deadline", IsError: true}, nil
			}
			return &remote.Result{Content: "sunny in " + a.City, Metadata: map[string]any{"celsius": 21}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	ch := rounds(t, nc, reg)
	until(t, ch, "weather registered", has("weather"))

	w, _ := reg.Get("weather")
	if w.Kind != policy.KindNetwork || w.Category != "remote" || !strings.Contains(string(w.Parameters), `"city"`) {
		t.Fatalf("weather = kind %s category %s schema %s", w.Kind, w.Category, w.Parameters)
	}
	p := tools.NewPipeline(reg)
	out, err := call(t, p, "weather", `{"city":"Lyon"}`)
	if err != nil || out.IsError || out.Content != "sunny in Lyon" {
		t.Fatalf("weather = %+v, %v", out, err)
	}
	if got.CallID != "c1" || got.Agent != "agent-1" || got.SessionID != "s1" {
		t.Errorf("the service saw %+v", got)
	}
	if _, err := call(t, p, "weather", `{"town":"Lyon"}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("bad arguments reached the service: %v", err)
	}
	out, err = call(t, p, "weather", `{"city":"Atlantis"}`)
	if err != nil || !out.IsError || out.Content != "no such city" {
		t.Errorf("failing call = %+v, %v", out, err)
	}

	// The service goes away: the tool leaves the registry.
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	until(t, ch, "weather unregistered", func(ns []string) bool { return !slices.Contains(ns, "weather") })
	if _, ok := reg.Get("weather"); ok {
		t.Fatal("weather still registered")
	}
}

func TestRemoteToolCollisions(t *testing.T) {
	srv := testenv.StartNATS(t, "")
	nc, _ := srv.Connect(t)
	reg := tools.NewRegistry()
	reg.MustRegister(&tools.Tool{Name: "read", Kind: policy.KindRead, Handler: tools.HandlerFunc(func(context.Context, *tools.Call) (*tools.Output, error) {
		return &tools.Output{Content: "built-in read"}, nil
	})})
	// A remote "read" must not replace the built-in one.
	svcConn, _ := srv.Connect(t)
	if _, err := remote.Serve(svcConn, remote.Tool{Name: "read"}, func(context.Context, *remote.Request) (*remote.Result, error) {
		return &remote.Result{Content: "remote read"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Two services serve "stamp" on its subject: either may answer.
	// A third announces "stamp" on a subject of its own: it is never
	// called (a tool is served on toolgate.remote.<name> only, the one
	// subject a tool identity of that name may listen on).
	for _, sv := range []struct{ name, subject string }{
		{"b-stamps", remote.SubjectPrefix + "stamp"}, {"a-stamps", remote.SubjectPrefix + "stamp"}, {"0-hijack", "stamps.hijack"},
	} {
		svc, err := micro.AddService(svcConn, micro.Config{Name: sv.name, Version: "1.0.0"})
		if err != nil {
			t.Fatal(err)
		}
		name := sv.name
		err = svc.AddEndpoint("stamp", micro.HandlerFunc(func(r micro.Request) {
			if r.Headers().Get(remote.HeaderDescribe) != "" {
				_ = r.RespondJSON(remote.Tool{Name: "stamp"}.Metadata())
				return
			}
			b, _ := json.Marshal(remote.Result{Content: "stamped by " + name})
			_ = r.Respond(b)
		}), micro.WithEndpointSubject(sv.subject), micro.WithEndpointMetadata(remote.Tool{Name: "stamp"}.Metadata()))
		if err != nil {
			t.Fatal(err)
		}
	}
	// Endpoints with a bad announcement are ignored.
	bad, _ := micro.AddService(svcConn, micro.Config{Name: "bad", Version: "1.0.0"})
	_ = bad.AddEndpoint("x", micro.HandlerFunc(func(r micro.Request) {}), micro.WithEndpointSubject("bad.x"),
		micro.WithEndpointMetadata(map[string]string{remote.MetaTool: "mcp__fake__tool"}))
	_ = bad.AddEndpoint("y", micro.HandlerFunc(func(r micro.Request) {}), micro.WithEndpointSubject("bad.y"),
		micro.WithEndpointMetadata(map[string]string{remote.MetaTool: "arr", remote.MetaSchema: `{"type":"array"}`}))

	ch := rounds(t, nc, reg)
	until(t, ch, "stamp registered", has("stamp"))
	p := tools.NewPipeline(reg)
	for i := 0; i < 5; i++ {
		out, err := call(t, p, "stamp", `{}`)
		if err != nil || (out.Content != "stamped by a-stamps" && out.Content != "stamped by b-stamps") {
			t.Fatalf("stamp = %+v, %v; want a service on toolgate.remote.stamp, never the hijacker", out, err)
		}
	}
	out, err := call(t, p, "read", `{}`)
	if err != nil || out.Content != "built-in read" {
		t.Fatalf("read = %+v, %v; the built-in must win", out, err)
	}
	st, _ := reg.Get("stamp")
	if st.Kind != policy.KindExecute {
		t.Errorf("stamp kind %s, want execute when none is announced", st.Kind)
	}
	for _, n := range []string{"mcp__fake__tool", "arr"} {
		if _, ok := reg.Get(n); ok {
			t.Errorf("%s registered from a bad announcement", n)
		}
	}
}

func TestServeRefusesBadTools(t *testing.T) {
	srv := testenv.StartNATS(t, "")
	nc, _ := srv.Connect(t)
	h := func(context.Context, *remote.Request) (*remote.Result, error) { return nil, nil }
	for _, tl := range []remote.Tool{
		{Name: ""}, {Name: "a.b"}, {Name: "mcp__x__y"}, {Name: "ok", Schema: json.RawMessage(`{"type":"string"}`)},
	} {
		if _, err := remote.Serve(nc, tl, h); !errors.Is(err, remote.ErrInvalidTool) {
			t.Errorf("Serve(%+v) err = %v, want ErrInvalidTool", tl, err)
		}
	}
}
