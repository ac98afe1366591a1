package worker

import (
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestEventThatCannotBeStoredIsRetried proves an asynchronous domain
// event publish (here a policy change) is not silently dropped: with the
// events stream gone the failure is counted, and once the stream is back
// the event is stored, once. Audit events have their own retry, counted
// in the audit metrics (TestAuditPublishIsRetriedNotDropped).
func TestEventThatCannotBeStoredIsRetried(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	rw := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
	_, js := s.Connect(t)
	if err := js.DeleteStream(ctxT(t), bus.StreamEvents); err != nil {
		t.Fatal(err)
	}
	rw.w.PolicyChanged(events.PolicyChangeData{Source: "test", Revision: "r1"})
	eventually(t, func() bool { return rw.w.EventStats().Failed >= 1 })
	if err := bus.Provision(ctxT(t), js, fastBus); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctxT(t), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, err := st.GetLastMsgForSubject(ctxT(t), events.PolicyChangeSubject)
		return err == nil
	})
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("events stream holds %d records, want 1", info.State.Msgs)
	}
	if lost := rw.w.EventStats().Lost; lost != 0 {
		t.Fatalf("%d events lost", lost)
	}
}
