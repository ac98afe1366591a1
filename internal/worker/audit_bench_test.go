package worker

import (
	"time"

	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// BenchmarkAuditAfterResult measures an allowed call's audit, its
// execution event with the gate's decision folded in, from encoding to
// its store acknowledgement, against a real server: what the worker
// spends per call on its audit trail.
func BenchmarkAuditAfterResult(b *testing.B) {
	benchFinal(b, func(w *Worker, in *events.Call, res events.ResultData) { w.auditAfterResult(in, res, true, nil) })
}

// BenchmarkPublishFinal measures what the worker spends per allowed call
// on its final result and audit: the result encoded, signed and stored
// (its acknowledgement awaited) and the execution audit event, with the
// gate's decision folded in, encoded, signed and stored. cpu-µs/op is
// the CPU of the whole process (the server's share included).
func BenchmarkPublishFinal(b *testing.B) {
	benchFinal(b, func(w *Worker, in *events.Call, res events.ResultData) {
		if err := w.publish(in, res, true, nil); err != nil {
			b.Fatal(err)
		}
	})
}

// benchFinal runs step for a new allowed call of read each time, the
// gate's decision pending, on a signing worker against a real server.
func benchFinal(b *testing.B, step func(*Worker, *events.Call, events.ResultData)) {
	w := openWorker(b, testenv.StartNATS(b, ""), Config{})
	in := &events.Call{ID: "bench-1", Agent: "bench", Tool: "read", Data: events.CallData{Arguments: json.RawMessage(`{"path":"data.txt"}`), SessionID: "s-1"}}
	d := &events.Decision{Action: "allow", Rule: "tools.read.allow", Revision: "fa44dea771e5"}
	res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: "read", Status: events.StatusOK, Output: strings.Repeat("0123456789abcde\n", 64), Decision: d}
	b.ReportAllocs()
	cpu := testenv.ProcessCPU()
	i := 0
	for b.Loop() {
		i++
		in.ID = "bench-" + strconv.Itoa(i) // a new dedup id each time: every event is stored
		w.decisions.Store(in, &pendingDecision{subject: events.AuditSubject("bench", "read"), id: CallKey(in.Agent, in.ID) + ":decision",
			data: events.AuditData{CallID: in.ID, Agent: in.Agent, Tool: "read", Kind: events.AuditDecision, Status: events.StatusOK,
				Decision: d, DecidedBy: []string{"policy"}}})
		step(w, in, res)
	}
	w.drainAudit(time.Now().Add(defaultPublishTimeout))
	b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	b.StopTimer()
	if st := w.EventStats(); st.Lost != 0 {
		b.Fatalf("%d events lost", st.Lost)
	}
}
