package test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
)

// benchTrailCalls is how many audited calls the replay benchmark's trail
// holds: 100,000, or $TOOLGATE_BENCH_TRAIL.
var benchTrailCalls = func() int {
	if n, err := strconv.Atoi(os.Getenv("TOOLGATE_BENCH_TRAIL")); err == nil && n > 0 {
		return n
	}
	return 100_000
}()

// benchTrail is a worker whose audit stream holds benchTrailCalls signed,
// chained execution events, made once for the benchmarks that read it.
var benchTrail = struct {
	once sync.Once
	w    *teststack.Worker
	ws   string
	err  error
}{}

// trailCalls are the calls the trail cycles through: the README's and a
// few the replayed policy changes.
var trailCalls = []struct {
	agent, tool string
	args        map[string]any
}{
	{"agent-1", "read", map[string]any{"path": "README.md"}},
	{"agent-1", "ls", map[string]any{}},
	{"agent-2", "grep", map[string]any{"pattern": "toolgate", "output_mode": "content"}},
	{"agent-1", "bash", map[string]any{"command": "uname -a"}},
	{"agent-2", "bash", map[string]any{"command": "ls -la && cat README.md | head -3"}},
	{"agent-2", "bash", map[string]any{"command": "sh -c 'git status'"}},
	{"agent-1", "write", map[string]any{"path": "notes.txt", "content": "x"}},
	{"agent-2", "bash", map[string]any{"command": "git push"}},
}

// makeTrail publishes the trail as one worker run writes it: each call's
// execution event (carrying the gate's decision and its view, judged by
// the built-in policy), signed with worker credentials of the install and
// chained, with a checkpoint every 1000 events and one at the end.
func makeTrail(b *testing.B) {
	ws := teststack.NewWorkspace(b)
	teststack.WriteFile(b, filepath.Join(ws, "README.md"), "# toolgate\n")
	w := teststack.StartWorker(b, ws, nil)
	nc, creds, err := identity.Dial(w.URL, "", identity.RoleWorker, "benchw")
	if err != nil || creds == nil {
		b.Fatalf("worker credentials: %v", err)
	}
	sign := eventsig.Sign(trust.SignerOf(creds))
	defer nc.Close()
	js, _ := jetstream.New(nc)
	gate := policy.NewGate(policy.Default())
	type judged struct {
		d *events.Decision
		j *events.Judged
	}
	var views []judged
	for _, c := range trailCalls {
		k, _ := policy.BuiltinKind(c.tool)
		d := gate.Evaluate(context.Background(), policy.Request{Agent: c.agent, Tool: c.tool, Known: true, Kind: k, Arguments: c.args, Workspace: ws})
		j := d.Judged
		views = append(views, judged{&events.Decision{Action: string(d.Action), Rule: d.Rule, Reason: d.Reason, Revision: d.Revision},
			&events.Judged{Workspace: j.Workspace, Command: j.Command, Workdir: j.Workdir, Path: j.Path, Pattern: j.Pattern, Hosts: j.Hosts, Links: j.Links}})
	}
	const source, chain = "toolgate://worker/benchw", "benchw-trail"
	head, start := "", time.Now().Add(-time.Hour)
	var futures []jetstream.PubAckFuture
	publish := func(m *nats.Msg) {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
		if len(futures) >= 4000 {
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			futures = futures[:0]
		}
	}
	// The run's chain opens with a checkpoint (seq 0) and closes with a
	// final one, as a worker's does.
	checkpoint := func(seq uint64, opening, final bool) {
		d := events.AuditCheckpointData{Chain: chain, Seq: seq, Head: head, Worker: "benchw", Time: time.Now().UTC(), Opening: opening, Final: final}
		m, err := events.EncodeData(events.AuditCheckpointSubject("benchw"), events.Attrs{ID: chain + ":checkpoint:" + strconv.FormatUint(seq, 10),
			Source: source, Type: events.TypeAuditCheckpoint, Sign: sign}, d, events.Binary)
		if err != nil {
			b.Fatal(err)
		}
		publish(m)
	}
	b.Logf("publishing %d audit events", benchTrailCalls)
	checkpoint(0, true, false)
	for i := range benchTrailCalls {
		c, v := trailCalls[i%len(trailCalls)], views[i%len(trailCalls)]
		id := "t" + strconv.Itoa(i)
		at := start.Add(time.Duration(i) * time.Millisecond).UTC()
		a := events.AuditData{Kind: events.AuditExecution, CallID: id, Agent: c.agent, Tool: c.tool, Status: events.StatusOK,
			Decision: v.d, Judged: v.j, DecidedBy: []string{"policy"}, DecidedAt: at, DurationMS: 3,
			ArgsSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", OutputBytes: 120,
			ResultSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Worker: "benchw", Time: at,
			Chain: chain, Seq: uint64(i + 1), Prev: head}
		m, err := events.EncodeData(events.AuditSubject(c.agent, c.tool), events.Attrs{ID: bus.AgentKey(c.agent, id) + ":audit", Source: source,
			Type: events.TypeCallAudited, Sign: func(input []byte) (string, string, error) {
				head = events.EventHash(input)
				return sign(input)
			}}, a, events.Binary)
		if err != nil {
			b.Fatal(err)
		}
		publish(m)
		if (i+1)%1000 == 0 {
			checkpoint(uint64(i+1), false, false)
		}
	}
	checkpoint(uint64(benchTrailCalls), false, true)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	benchTrail.w, benchTrail.ws = w, ws
}

// BenchmarkPolicyReplay reads a trail of 100,000 audited calls as
// `toolctl audit --verify` does (every signature, the chain and its
// checkpoints), and as `toolctl policy replay` does (the same, then every
// call judged again under a policy that changes an eighth of them). One
// op is one whole command.
//
//	go test ./test -run XXX -bench PolicyReplay -benchtime 3x
func BenchmarkPolicyReplay(b *testing.B) {
	benchTrail.once.Do(func() { makeTrail(b) })
	if benchTrail.w == nil {
		b.Skip("the trail was not made")
	}
	strict := filepath.Join(b.TempDir(), "strict.yaml")
	if err := os.WriteFile(strict, []byte(string(policy.DefaultDocument())+"\nagents:\n  agent-2:\n    tools: {bash: {ask: off}}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, want int, args ...string) {
		cpu0 := cpuTime()
		for b.Loop() {
			var o, e discard
			code := toolctl.Run(context.Background(), append([]string{"--nats", benchTrail.w.URL}, args...), &o, &e)
			if code != want {
				b.Fatalf("%v: exit %d, want %d: %s", args, code, want, e.tail)
			}
		}
		b.ReportMetric(float64(benchTrailCalls), "calls/op")
		b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	}
	b.Run("audit-verify", func(b *testing.B) { run(b, toolctl.ExitOK, "audit", "--verify") })
	b.Run("policy-replay", func(b *testing.B) {
		run(b, toolctl.ExitChanged, "policy", "replay", strict, "--since", "48h", "--json")
	})
}

// discard keeps only the end of what is written to it.
type discard struct{ tail string }

func (d *discard) Write(p []byte) (int, error) {
	s := d.tail + string(p)
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	d.tail = s
	return len(p), nil
}

// cpuTime is the CPU time the process has used (user and system): on a
// shared machine it says what a command costs when its wall time does
// not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
