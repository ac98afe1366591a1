package toolctl_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/toolctl"
)

// TestEventsNew: --new prints a call made while it runs and none of what
// was stored before; --follow says on stderr that it replayed the stored
// events first; both together are a usage error.
func TestEventsNew(t *testing.T) {
	w := startWorker(t)
	if _, errOut, code := run(t, "--nats", w.url, "call", "--id", "before-new", "read", "path=README.md"); code != toolctl.ExitOK {
		t.Fatalf("call: %s", errOut)
	}
	follow := func(flag, stderrWant, call string) string {
		t.Helper()
		var out, errOut lockedBuffer
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan int, 1)
		go func() { done <- toolctl.Run(ctx, []string{"events", flag, "--nats", w.url}, &out, &errOut) }()
		waitFor := func(b *lockedBuffer, what string) {
			t.Helper()
			for {
				changed := b.changed()
				if strings.Contains(b.String(), what) {
					return
				}
				select {
				case code := <-done:
					t.Fatalf("events %s ended (%d) before printing %s:\n%s%s", flag, code, what, &out, &errOut)
				case <-changed:
				case <-time.After(testenv.Patience):
					t.Fatalf("events %s never printed %s:\n%s%s", flag, what, &out, &errOut)
				}
			}
		}
		waitFor(&errOut, stderrWant)
		if _, e, code := run(t, "--nats", w.url, "call", "--id", call, "ls"); code != toolctl.ExitOK {
			t.Fatalf("call: %s", e)
		}
		waitFor(&out, `"call_id":"`+call+`"`)
		cancel()
		if code := testenv.Recv(t, done, "events' exit"); code != toolctl.ExitOK {
			t.Fatalf("events %s exited %d after an interrupt: %s", flag, code, &errOut)
		}
		return out.String()
	}
	if out := follow("--new", "printing new events as they come", "during-new"); strings.Contains(out, "before-new") {
		t.Errorf("events --new printed a stored event:\n%s", out)
	}
	if out := follow("--follow", "replayed ", "during-follow"); !strings.Contains(out, "before-new") {
		t.Errorf("events --follow did not replay the stored events:\n%s", out)
	}
	if _, errOut, code := run(t, "--nats", w.url, "events", "--new", "--follow"); code != toolctl.ExitUsage || !strings.Contains(errOut, "choose one") {
		t.Errorf("--new --follow: exit %d, %s", code, errOut)
	}
}
