package test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/toolctl"
	"github.com/toolgate/toolgate/internal/trust/trusttest"
	"github.com/toolgate/toolgate/pkg/events"
)

// The attacks of this file are an agent's, with its own credentials only,
// against what the bus carries for others or keeps as accounts.

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// until polls cond until it holds, failing the test after d.
func until(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %s", d)
		}
	}
}

// metricSum adds the values of the Prometheus samples at addr whose line
// starts with name and contains every one of labels.
func metricSum(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
outer:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue outer
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestAttackOneCallIDManyMsgIDsRunsOnce: an agent sends one call id 30
// times at once, each message with a Nats-Msg-Id of its own, for a
// read-only tool under a budget of one call. The tool runs once, however
// the messages interleave: a budgeted call is claimed and charged once
// per (agent, call id). It counts executions (calls that ran to ok),
// not verdicts.
func TestAttackOneCallIDManyMsgIDsRunsOnce(t *testing.T) {
	ws := newWorkspace(t)
	// Enough files that a glob takes a while: the duplicates overlap.
	for i := range 4000 {
		writeFile(t, filepath.Join(ws, fmt.Sprintf("d%d/e%d/f%d.txt", i%40, i%7, i)), "a\n")
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools: {default: allow}\nbudgets:\n  one-glob:\n    tools: [glob]\n    max_calls: 1\n    per: 24h\n")
	metrics := freeAddr(t)
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol; o.MetricsListen = metrics })
	nc := dialAs(t, p.url, identity.RoleAgent, "mallory")
	admin, err := jetstream.New(dialAs(t, p.url, identity.RoleAdmin, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const sends = 30
	id := "same-call-id"
	for i := range sends {
		func() {
			ev, err := events.New(id, events.AgentSource("mallory"), events.TypeCallRequested, map[string]any{"arguments": map[string]any{"pattern": "**/*.txt"}})
			if err != nil {
				t.Error(err)
				return
			}
			m, err := events.Encode(events.CallSubject("mallory", "glob"), ev, events.Binary)
			if err != nil {
				t.Error(err)
				return
			}
			m.Header.Set(events.HeaderMsgID, fmt.Sprintf("%s-%d", id, i))
			if err := nc.PublishMsg(m); err != nil { // all at once: no wait for the acks
				t.Error(err)
			}
		}()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// All stored before the count is awaited.
	until(t, 30*time.Second, func() bool {
		s, err := admin.Stream(ctx, bus.StreamCalls)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.LastSeq >= sends
	})
	// Every message is settled when the consumer has none pending or
	// waiting for an ack.
	until(t, 30*time.Second, func() bool {
		c, err := admin.Consumer(ctx, bus.StreamCalls, bus.ConsumerWorkers)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	if ran := metricSum(t, metrics, "toolgate_calls_total", `tool="glob"`, `outcome="ok"`); ran != 1 {
		t.Fatalf("one call id under a budget of 1 ran %v times", ran)
	}
}

// TestAttackInvalidSharedPolicyNeverDowngrades: an admin pushed a policy
// that denies read; something else then stores a value under the shared
// policy key that is no sealed policy (as an agent could make the server
// store, answering on $KV.toolgate_policy.policy). A worker that starts
// afterwards applies the last good pushed policy - read stays denied -
// never the built-in default that allows it.
func TestAttackInvalidSharedPolicyNeverDowngrades(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "secret\n")
	data := stateTempDir(t)
	p := startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data })
	admin := trusttest.CredsFile(t, installUser(t, identity.RoleAdmin, "admin"))
	good := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, good, "tools:\n  default: allow\n  read:\n    action: deny\n")
	if out, errOut, code := p.toolctl(t, "policy", "push", good, "--creds", admin); code != toolctl.ExitOK {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	c := p.client(t, "mallory")
	eventually(t, "the pushed policy", func() (bool, string) {
		r := call(t, c, "read", `{"path":"README.md"}`)
		return r.Status == events.StatusDenied, string(r.Status)
	})
	js, err := jetstream.New(dialAs(t, p.url, identity.RoleAdmin, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bus.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "policy", []byte(`{"status":"ok","output":"not a policy"}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	p = startProcess(t, ws, func(o *daemon.Options) { o.DataDir = data })
	if strings.Contains(p.out.String(), "policy builtin") {
		t.Fatalf("the restarted worker fell back to the built-in policy:\n%s", p.out)
	}
	c = p.client(t, "mallory")
	if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusDenied || strings.Contains(r.Output, "secret") {
		t.Fatalf("read after a restart over an invalid shared policy: %+v", r)
	}
}

// TestAttackCorruptBudgetCounter: an agent's spent budget counter is
// overwritten - with an empty object, which the old reading took for a
// fresh counter, and with garbage, which refused every call until an
// admin repaired it. Neither frees the budget nor blocks it: the worker
// rebuilds the counter from the audited charges, and the next call is
// refused as spent. It counts executions, not verdicts.
func TestAttackCorruptBudgetCounter(t *testing.T) {
	for _, forged := range []string{`{}`, `garbage`} {
		t.Run(forged, func(t *testing.T) {
			ws := newWorkspace(t)
			writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			writeFile(t, pol, "tools: {default: allow}\nbudgets:\n  two-reads:\n    tools: [read]\n    max_calls: 2\n    per: 24h\n")
			metrics := freeAddr(t)
			p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol; o.MetricsListen = metrics })
			c := p.client(t, "mallory")
			if r := call(t, c, "read", `{"path":"README.md"}`); r.Status != events.StatusOK {
				t.Fatalf("first read: %+v", r)
			}
			js, err := jetstream.New(dialAs(t, p.url, identity.RoleWorker, "w"))
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.KeyValue(context.Background(), bus.BucketBudgets)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(context.Background(), "two-reads.mallory", []byte(forged)); err != nil {
				t.Fatal(err)
			}
			// The second read is the last the budget allows; the third and
			// fourth are refused.
			var statuses []events.Status
			for range 3 {
				statuses = append(statuses, call(t, c, "read", `{"path":"README.md"}`).Status)
			}
			if ran := metricSum(t, metrics, "toolgate_calls_total", `tool="read"`, `outcome="ok"`); ran != 2 || statuses[0] != events.StatusOK {
				t.Fatalf("reads that ran under a budget of 2 over a forged counter: %v (statuses after the forgery %v)", ran, statuses)
			}
		})
	}
}
