package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestAuditViewAddsLittle measures what the gate's view of each call
// (the audit's judged field) adds to the audit stream for the README's
// calls, run through a real worker under the built-in policy: the bytes
// stored per call (subject, headers and data of every audit event)
// against the same events without the field. It must add under 5 %.
// BENCHMARKS.md has the numbers (go test ./test -run TestAuditViewAddsLittle -v).
func TestAuditViewAddsLittle(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "# toolgate\nA tool-execution layer; toolgate runs tools.\n")
	p := startProcess(t, ws, nil)
	c := p.client(t, "agent-size")
	readme := []struct{ tool, args string }{
		{"read", `{"path":"README.md"}`},
		{"ls", `{}`},
		{"grep", `{"pattern":"toolgate","output_mode":"content"}`},
		{"bash", `{"command":"uname -a"}`},
		{"read", `{"path":"README.md","limit":3}`},
	}
	for _, r := range readme {
		if res := call(t, c, r.tool, r.args); res.Status != events.StatusOK {
			t.Fatalf("%s %s: %s %s", r.tool, r.args, res.Status, res.Output)
		}
	}
	// The README's `git push`: the default policy asks, and the call waits.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	parked := make(chan struct{}, 1)
	go func() {
		_, _ = c.Call(ctx, "bash", json.RawMessage(`{"command":"git push"}`), client.OnPending(func(events.ResultData) { parked <- struct{}{} }))
	}()
	select {
	case <-parked:
	case <-ctx.Done():
		t.Fatal("git push never parked")
	}
	calls := len(readme) + 1

	nc, _, err := identity.Dial(p.url, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	var with, without, views int
	eventually(t, "the calls' audit events stored", func() (bool, string) {
		with, without, views = 0, 0, 0
		for seq := uint64(1); ; seq++ {
			m, err := st.GetMsg(context.Background(), seq)
			if err != nil {
				break
			}
			if !strings.HasPrefix(m.Subject, events.AuditSubject("agent-size", "")) {
				continue
			}
			size := len(m.Subject) + len(m.Data)
			for k, vs := range m.Header {
				for _, v := range vs {
					size += len(k) + len(v)
				}
			}
			with += size
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(m.Data, &fields); err != nil {
				t.Fatal(err)
			}
			if raw, ok := fields["judged"]; ok {
				views++
				size -= len(`"judged":,`) + len(raw)
			}
			without += size
		}
		return views == calls, ""
	})
	added := float64(with-without) / float64(without) * 100
	t.Logf("README calls: %d; audit bytes per call: %d without the gate's view, %d with it (+%.2f %%)",
		calls, without/calls, with/calls, added)
	if added >= 5 {
		t.Errorf("the gate's view adds %.2f %% to the audit stream's bytes per call, want under 5 %%", added)
	}
}
