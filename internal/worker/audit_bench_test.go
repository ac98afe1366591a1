package worker

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// BenchmarkAuditAfterResult measures a call's two audit events, the
// gate's decision and the execution, from encoding to their store
// acknowledgements, against a real server: what the worker spends per
// call on its audit trail.
func BenchmarkAuditAfterResult(b *testing.B) {
	w := openWorker(b, testenv.StartNATS(b, ""), Config{})
	in := &events.Call{ID: "bench-1", Agent: "bench", Tool: "read", Data: events.CallData{Arguments: json.RawMessage(`{"path":"data.txt"}`), SessionID: "s-1"}}
	res := events.ResultData{CallID: in.ID, Agent: in.Agent, Tool: "read", Status: events.StatusOK, Output: strings.Repeat("0123456789abcde\n", 64)}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		in.ID = "bench-" + strconv.Itoa(i) // a new dedup id each time: every event is stored
		w.auditExecution(in, res, nil, "")
		w.publishAudit(events.AuditSubject("bench", "read"), CallKey(in.Agent, in.ID)+":decision", events.TypeDecisionAudited, events.AuditData{CallID: in.ID, Agent: in.Agent, Tool: "read", Kind: events.AuditDecision})
	}
	w.drainAudit(defaultPublishTimeout)
	b.StopTimer()
	if st := w.EventStats(); st.Lost != 0 {
		b.Fatalf("%d events lost", st.Lost)
	}
}
