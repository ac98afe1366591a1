package worker

import (
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestAuditThatCannotBeStoredIsRetried proves the asynchronous audit
// publish is neither awaited by the call nor silently dropped: with the
// audit stream gone the call still completes, the failure is counted, and
// once the stream is back the record is stored, once.
func TestAuditThatCannotBeStoredIsRetried(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	rw := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	_, js := s.Connect(t)
	if err := js.DeleteStream(ctxT(t), bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, s, "audited")
	r, err := c.Call(ctxT(t), "echo", map[string]any{"text": "hi"}, client.WithID("aud-1"))
	if err != nil || r.Status != events.StatusOK {
		t.Fatalf("call: %+v %v", r, err)
	}
	eventually(t, func() bool { return rw.w.EventStats().Failed >= 1 })
	if err := bus.Provision(ctxT(t), js, fastBus); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctxT(t), bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, err := st.GetLastMsgForSubject(ctxT(t), events.AuditSubject("audited", "echo"))
		return err == nil
	})
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("audit stream holds %d records, want 1", info.State.Msgs)
	}
	if lost := rw.w.EventStats().Lost; lost != 0 {
		t.Fatalf("%d events lost", lost)
	}
}
