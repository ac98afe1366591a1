package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// cancelPolicy runs every shell command and asks before edits.
const cancelPolicy = `tools:
  default: allow
  edit:
    action: ask
exec:
  security: full
  ask: off
  confirm_dangerous: false
`

// cancelFleet is two worker processes on one server sharing a workspace.
type cancelFleet struct {
	first, second *process
	ws            string
}

func startCancelFleet(t *testing.T, concurrency int) *cancelFleet {
	t.Helper()
	ws := newWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, cancelPolicy)
	first := startProcess(t, ws, func(o *daemon.Options) {
		o.PolicyFile, o.Name, o.Concurrency = pol, "first", concurrency
	})
	second := startProcess(t, ws, func(o *daemon.Options) {
		o.PolicyFile, o.Name, o.Concurrency, o.NATSURL = pol, "second", concurrency, first.url
	})
	return &cancelFleet{first: first, second: second, ws: ws}
}

// sleepArg is a sleep duration no other process uses, so that the
// processes of one call can be told apart in /proc.
func sleepArg() string { return fmt.Sprintf("%d.%09d", 5000+rand.IntN(5000), rand.IntN(1e9)) }

// sleepers counts the live (not zombie) processes running sleep arg.
func sleepers(t *testing.T, arg string) int {
	t.Helper()
	want := "sleep\x00" + arg + "\x00"
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || string(cmdline) != want {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); err != nil || i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		n++
	}
	return n
}

// waitSleepers polls until n processes run sleep arg (a bounded count of
// polls: fork and SIGKILL complete asynchronously).
func waitSleepers(t *testing.T, arg string, n int) {
	t.Helper()
	got := 0
	for range 4000 {
		if got = sleepers(t, arg); got == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d processes run sleep %s, want %d", got, arg, n)
}

// startLong calls bash with command as agent and returns once the command
// printed "ready"; the final result comes on the channel.
func startLong(t *testing.T, c *client.Client, id, command string) <-chan *events.ResultData {
	t.Helper()
	ready := make(chan struct{}, 1)
	final := make(chan *events.ResultData, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := c.Call(ctx, "bash", map[string]any{"command": command, "timeout": 600000}, client.WithID(id),
			client.OnProgress(func(p events.ProgressData) {
				if strings.Contains(p.Chunk, "ready") {
					select {
					case ready <- struct{}{}:
					default:
					}
				}
			}))
		if err != nil {
			t.Errorf("call %s: %v", id, err)
		}
		final <- res
	}()
	select {
	case <-ready:
	case res := <-final:
		t.Fatalf("call %s ended before it was ready: %+v", id, res)
	case <-time.After(90 * time.Second):
		t.Fatalf("call %s never said ready", id)
	}
	return final
}

func TestCancelRunningCommandKillsItsProcessTree(t *testing.T) {
	f := startCancelFleet(t, 0)
	c := f.first.client(t, "alice")
	arg := sleepArg()
	// A background child that would write a marker after sleeping, a
	// grandchild orphaned by its subshell, and the command's own marker
	// once everything ends.
	command := fmt.Sprintf(`(sleep %[1]s; touch late-marker) & (sleep %[1]s &); echo ready; wait; touch marker`, arg)
	final := startLong(t, c, "cancel-running", command)
	waitSleepers(t, arg, 2)

	out, errOut, code := f.first.toolctl(t, "--agent", "alice", "cancel", "cancel-running")
	if code != 0 || !strings.Contains(out, "is running on worker") || !strings.Contains(out, "call cancel-running: cancelled") {
		t.Fatalf("toolctl cancel: %d\n%s%s", code, out, errOut)
	}
	res := wait(t, final)
	if res.Status != events.StatusCancelled || !res.IsError {
		t.Fatalf("result %+v", res)
	}
	// Every process of the call is gone, so nothing can write a marker
	// any more: none was written.
	waitSleepers(t, arg, 0)
	for _, m := range []string{"marker", "late-marker"} {
		if _, err := os.Stat(filepath.Join(f.ws, m)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (err %v): the command went on after it was cancelled", m, err)
		}
	}
}

func TestCancelQueuedCallNeverRuns(t *testing.T) {
	f := startCancelFleet(t, 1) // one call at a time per worker
	c := f.first.client(t, "alice")
	arg := sleepArg()
	// Both workers busy: the next call stays in the queue.
	busy := []<-chan *events.ResultData{
		startLong(t, c, "busy-1", fmt.Sprintf("echo ready; sleep %s", arg)),
		startLong(t, c, "busy-2", fmt.Sprintf("echo ready; sleep %s", arg)),
	}
	id, err := c.Submit(context.Background(), "bash", map[string]any{"command": "touch queued-marker"}, client.WithID("queued"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Cancel(context.Background(), id)
	if err != nil || r.State != events.CancelQueued {
		t.Fatalf("cancel queued: %+v %v", r, err)
	}
	// Free the workers (cancelling the busy calls too); one of them
	// takes the queued call and answers it cancelled.
	for _, b := range []string{"busy-1", "busy-2"} {
		if _, err := c.Cancel(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range busy {
		if res := wait(t, ch); res.Status != events.StatusCancelled {
			t.Fatalf("busy call: %+v", res)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusCancelled || !strings.Contains(res.Output, "before it ran") {
		t.Fatalf("queued call: %+v", res)
	}
	// The call is final: no worker runs it any more, and none did.
	if _, err := os.Stat(filepath.Join(f.ws, "queued-marker")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cancelled queued call ran (err %v)", err)
	}
	waitSleepers(t, arg, 0)
}

func TestCancelParkedCallWithdrawsTheApproval(t *testing.T) {
	f := startCancelFleet(t, 0)
	approverURL := startApprover(t, f.first.url, nil)
	writeFile(t, filepath.Join(f.ws, "parked.txt"), "before\n")
	c := f.first.client(t, "alice")
	pending := make(chan struct{}, 1)
	final := make(chan *events.ResultData, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := c.Call(ctx, "edit", map[string]any{"path": "parked.txt", "old_string": "before", "new_string": "after"},
			client.WithID("parked-call"), client.OnPending(func(events.ResultData) { pending <- struct{}{} }))
		if err != nil {
			t.Errorf("call: %v", err)
		}
		final <- res
	}()
	select {
	case <-pending:
	case <-time.After(90 * time.Second):
		t.Fatal("the edit was never parked")
	}
	// listed waits until the approver lists the call (or stops listing it).
	listed := func(want bool) {
		t.Helper()
		for range 400 {
			out, errOut, code := f.first.toolctl(t, "approvals", "list", "--approver", approverURL, "--token", aliceToken)
			if code != 0 {
				t.Fatalf("approvals list: %d %s%s", code, out, errOut)
			}
			if strings.Contains(out, "parked-call") == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the approver never showed the call listed=%v", want)
	}
	listed(true)
	r, err := c.Cancel(context.Background(), "parked-call")
	if err != nil || r.State != events.CancelParked {
		t.Fatalf("cancel parked: %+v %v", r, err)
	}
	res := wait(t, final)
	if res.Status != events.StatusCancelled || !strings.Contains(res.Output, "withdrawn") {
		t.Fatalf("result %+v", res)
	}
	// People no longer see it waiting, and the file was never edited.
	listed(false)
	if b, err := os.ReadFile(filepath.Join(f.ws, "parked.txt")); err != nil || string(b) != "before\n" {
		t.Fatalf("the cancelled edit happened: %q %v", b, err)
	}
}

func TestCancelFinishedCallIsANoOp(t *testing.T) {
	f := startCancelFleet(t, 0)
	writeFile(t, filepath.Join(f.ws, "README.md"), "hello\n")
	c := f.first.client(t, "alice")
	res, err := c.Call(context.Background(), "read", map[string]any{"path": "README.md"}, client.WithID("done-call"))
	if err != nil || res.Status != events.StatusOK {
		t.Fatalf("read: %+v %v", res, err)
	}
	out, errOut, code := f.first.toolctl(t, "--agent", "alice", "cancel", "done-call")
	if code != 0 || !strings.Contains(out, "already finished with status ok; nothing to cancel") {
		t.Fatalf("toolctl cancel: %d\n%s%s", code, out, errOut)
	}
	stored, err := c.Result(context.Background(), "done-call")
	if err != nil || stored.Status != events.StatusOK {
		t.Fatalf("stored result after the cancel: %+v %v", stored, err)
	}
}

func TestAgentCannotCancelAnotherAgentsCall(t *testing.T) {
	f := startCancelFleet(t, 0)
	alice := f.first.client(t, "alice")
	// Alice's command waits for a file only she makes, then finishes.
	final := startLong(t, alice, "alices-call", `echo ready; while [ ! -e go ]; do sleep 0.05; done; echo finished`)

	violations := make(chan error, 4)
	nc, _, err := identity.Dial(f.first.url, "", identity.RoleAgent, "bob",
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(events.CancelSubject("alice", "alices-call"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("bob's cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not refuse bob's cancel")
	}
	// Bob cancelling "his" call of that id touches nothing of alice's: he has
	// no such call.
	bob, err := client.New(nc, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := bob.Cancel(context.Background(), "alices-call"); err != nil || r.State != events.CancelUnknown {
		t.Fatalf("bob's own namespace: %+v %v", r, err)
	}
	writeFile(t, filepath.Join(f.ws, "go"), "")
	res := wait(t, final)
	if res.Status != events.StatusOK || !strings.Contains(res.Output, "finished") {
		b, _ := json.Marshal(res)
		t.Fatalf("alice's call was touched: %s", b)
	}
}

func TestCancellingTheCallsContextCancelsTheCall(t *testing.T) {
	f := startCancelFleet(t, 0)
	c := f.first.client(t, "alice")
	arg := sleepArg()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, "bash", map[string]any{"command": fmt.Sprintf("sleep %s & echo ready; wait", arg)},
			client.WithID("ctx-call"), client.OnProgress(func(p events.ProgressData) {
				if strings.Contains(p.Chunk, "ready") {
					waitSleepers(t, arg, 1)
					cancel()
				}
			}))
		errs <- err
	}()
	if err := testenv.Recv(t, errs, "errs"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Call returned %v, want context.Canceled", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer wcancel()
	res, err := c.Wait(wctx, "ctx-call")
	if err != nil || res.Status != events.StatusCancelled {
		t.Fatalf("result after the context was cancelled: %+v %v", res, err)
	}
	waitSleepers(t, arg, 0)
}
