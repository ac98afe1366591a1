package test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestQueuedCallsPerAgentAreCapped: an agent publishing calls faster than
// they run cannot grow the calls stream without bound. On a worker of
// two slots, one per agent, an agent's 60 calls that wait for a file
// stay queued (one running, the rest held as schedules); past its quota
// of 20 the intake refuses its calls with the quota's error, its calls in
// the stream stay within the quota and one counting step, and the
// refusals are counted under bound="queued_calls". Another agent's call
// is accepted and runs meanwhile; once the first agent's calls have run,
// its new call is accepted again. Before, all 60 were stored.
func TestQueuedCallsPerAgentAreCapped(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	const quota, step, total = 20, 2, 60 // step: an eighth of the quota
	p, metrics, js := startFairWorker(t, 2, 1, func(o *daemon.Options) { o.MaxQueuedCalls = quota })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	flood := p.client(t, "flood")
	var accepted []string
	refused := 0
	for i := range total {
		id := fmt.Sprintf("flood-%d", i)
		_, err := flood.Submit(ctx, "bash", map[string]any{"command": "until [ -e release ]; do sleep 0.2; done"}, client.WithID(id))
		switch {
		case err == nil:
			accepted = append(accepted, id)
		case strings.Contains(err.Error(), worker.ErrQueuedCallsQuota.Error()) && strings.Contains(err.Error(), fmt.Sprintf("its quota is %d", quota)):
			refused++
		default:
			t.Fatalf("call %s: %v", id, err)
		}
	}
	t.Logf("%d calls accepted, %d refused", len(accepted), refused)
	if refused == 0 || len(accepted) > quota+step {
		t.Fatalf("%d of %d calls accepted, %d refused; want at most %d accepted (quota %d, step %d)", len(accepted), total, refused, quota+step, quota, step)
	}
	// The quota counts the calls waiting as schedules too.
	eventually(t, "the flood's calls waiting as schedules", func() (bool, string) {
		n, waiting := storedCalls(ctx, t, js, "flood")
		if n > quota+step {
			t.Fatalf("%d calls of the agent in the calls stream, want at most %d", n, quota+step)
		}
		return waiting > 0, fmt.Sprintf("%d stored, %d waiting", n, waiting)
	})
	if got := metricSum(t, metrics, "toolgate_agent_requests_refused_total", `bound="queued_calls"`); got != float64(refused) {
		t.Errorf("%v refusals counted under bound=\"queued_calls\", want %d", got, refused)
	}

	// Another agent's call is accepted and runs while the flood waits.
	r, err := p.client(t, "alice").Call(ctx, "read", map[string]any{"path": "README.md"})
	if err != nil || r.Status != events.StatusOK {
		t.Fatalf("another agent's read beside the flood: %+v, %v", r, err)
	}

	// Once the flood has run, the agent's new call is accepted again.
	writeFile(t, filepath.Join(p.ws, "release"), "")
	for _, id := range accepted {
		if r, err := flood.Wait(ctx, id); err != nil || r.Status != events.StatusOK {
			t.Fatalf("flood call %s: %+v, %v", id, r, err)
		}
	}
	var again *events.ResultData
	eventually(t, "the agent's call accepted once its queue drained", func() (bool, string) {
		again, err = flood.Call(ctx, "read", map[string]any{"path": "README.md"})
		return err == nil, fmt.Sprint(err)
	})
	if again.Status != events.StatusOK {
		t.Fatalf("the agent's call after its queue drained: %+v", again)
	}
}

// storedCalls counts agent's calls in the calls stream, and of them
// those waiting as schedules.
func storedCalls(ctx context.Context, t *testing.T, js jetstream.JetStream, agent string) (n, waiting int) {
	t.Helper()
	st, err := js.Stream(ctx, bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.CallsOf(agent)))
	if err != nil {
		t.Fatal(err)
	}
	for subject, c := range info.State.Subjects {
		n += int(c)
		if strings.HasPrefix(subject, events.Prefix+".call_wait.") {
			waiting += int(c)
		}
	}
	return n, waiting
}
