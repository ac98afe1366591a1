package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
)

// The bus side: the raw pattern carrying toolgate's messages. Its worker
// does no tool work (no decode of the call's data, no schema, no gate, no
// file read, no redaction); per call it publishes what toolgate's worker
// publishes: the result as a binary CloudEvent with toolgate's result
// data (the output the built-in tool gives, see toolOutputs), its ack
// awaited; then the audit event (the execution, carrying the gate's
// decision, a CloudEvent with its data), its ack counted in the
// background, not awaited; and it acks the call. Like toolgate it claims (a KV create, awaited)
// only a call with effects (-tool write), never a read. Its calls/s are
// how close toolgate could come to the raw pattern with its message
// pattern if its own handling of a call cost nothing.
const (
	busInbox  = "_INBOX.bus"
	busCalls  = "bench.bus.call."
	busResult = "bench.bus.result."
	busAudit  = "bench.bus.audit."
)

// toolOutputs are what the built-in read and write tools give back for the
// bench's calls, run once each in a workspace of their own: the bus side
// publishes those outputs, as toolgate's worker would.
func toolOutputs() map[string]*tools.Output {
	ws, err := os.MkdirTemp("", "toolgate-bench-bus-")
	must(err)
	defer os.RemoveAll(ws)
	must(os.WriteFile(filepath.Join(ws, "data.txt"), data1KiB, 0o644))
	reg := tools.NewRegistry()
	must(builtin.Register(reg, builtin.Config{Workspace: ws}))
	p := tools.NewPipeline(reg)
	out := map[string]*tools.Output{}
	for _, tool := range []string{"read", "write"} {
		o, err := p.Handle(context.Background(), &tools.Call{ID: "bus-" + tool, Agent: agent, Name: tool, Arguments: json.RawMessage(benchArgs(tool, 0))})
		must(err)
		if o.IsError {
			panic(tool + ": " + o.Content)
		}
		out[tool] = o
	}
	return out
}

// busWorker is the bus side's worker process.
func busWorker(url string, credsFile []string) {
	ctx := context.Background()
	opts := []nats.Option{nats.Name("bench-bus"), nats.CustomInboxPrefix(busInbox)}
	if len(credsFile) > 0 {
		opts = append(opts, nats.UserCredentials(credsFile[0]))
	}
	nc, err := nats.Connect(url, opts...)
	must(err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BUS_CALLS", Subjects: []string{busCalls + ">"}, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute})
	must(err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BUS_RESULTS", Subjects: []string{busResult + ">"}, Duplicates: 2 * time.Minute})
	must(err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BUS_AUDIT", Subjects: []string{busAudit + ">"}, Duplicates: 2 * time.Minute})
	must(err)
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_bus_claims", History: 1})
	must(err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "BUS_CALLS", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5, AckWait: 30 * time.Second})
	must(err)

	// Audit acks come back on one subject and are only counted: the
	// cheapest way to keep them off the call's path.
	var published, acked, refused atomic.Int64
	ackSubj := busInbox + ".audit"
	sub, err := nc.Subscribe(ackSubj, func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte(`"error"`)) {
			refused.Add(1)
			return
		}
		acked.Add(1)
	})
	must(err)
	must(sub.SetPendingLimits(-1, -1))

	outputs := toolOutputs()
	const source = "toolgate://worker/bus"
	const hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	decision := &events.Decision{Action: "allow", Rule: "tools.read.allow", Revision: "fa44dea771e5"}
	serve("bus", cons, func(m jetstream.Msg) {
		start := time.Now()
		id := m.Headers().Get(nats.MsgIdHdr)
		agent, tool, _ := strings.Cut(strings.TrimPrefix(m.Subject(), busCalls), ".")
		o := outputs[tool]
		if tool != "read" {
			if _, err := kv.Create(ctx, agent+"."+id, []byte(`{"state":"running"}`)); err != nil {
				_ = m.Ack() // a duplicate
				return
			}
		}
		res, err := events.EncodeData(busResult+agent+"."+id, events.Attrs{ID: agent + "." + id + ":result", Source: source, Type: events.TypeCallCompleted, Subject: id},
			events.ResultData{CallID: id, Agent: agent, Tool: tool, Status: events.StatusOK, Output: o.Content, Metadata: o.Metadata, Decision: decision, DurationMS: time.Since(start).Milliseconds()}, events.Binary)
		must(err)
		if _, err := js.PublishMsg(ctx, res); err != nil {
			return
		}
		a := events.AuditData{Kind: events.AuditExecution, CallID: id, Agent: agent, Tool: tool, Status: events.StatusOK, Decision: decision,
			DecidedBy: []string{"policy"}, DecidedAt: start.UTC(), DurationMS: time.Since(start).Milliseconds(), ArgsSHA256: hash,
			OutputBytes: len(o.Content), ResultSHA256: hash, Worker: "bus", Time: time.Now().UTC()}
		am, err := events.EncodeData(busAudit+agent+"."+tool, events.Attrs{ID: agent + "." + id + ":audit", Source: source, Type: events.TypeCallAudited, Subject: id}, a, events.Binary)
		must(err)
		am.Reply = ackSubj
		if nc.PublishMsg(am) == nil {
			published.Add(1)
		}
		_ = m.Ack()
	})
	// The last acks may still be on their way.
	for deadline := time.Now().Add(5 * time.Second); acked.Load()+refused.Load() < published.Load() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "bus worker: %d audit events published, %d stored, %d refused\n", published.Load(), acked.Load(), refused.Load())
}
