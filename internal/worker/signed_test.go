package worker

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestStoredResultCountsOnlyWhenSigned: a result stored on a call's
// subject counts as "finished before" (redelivery, resume, cancel) only
// when a trusted worker signed it for that very call; a planted one is
// refused and counted.
func TestStoredResultCountsOnlyWhenSigned(t *testing.T) {
	w := openWorker(t, testenv.StartNATS(t, ""), Config{Name: "w1"})
	ctx := ctxT(t)
	in := &events.Call{ID: "c1", Agent: "ann", Tool: "peek", Mode: events.Binary}
	forged, err := events.EncodeData(events.ResultSubject("ann", "c1"), events.Attrs{ID: "ann.c1:result", Source: "toolgate://worker/w9",
		Type: events.TypeCallCompleted, Subject: "c1"}, events.ResultData{CallID: "c1", Agent: "ann", Status: events.StatusOK, Output: "forged"}, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	forged.Header.Set(events.HeaderMsgID, "planted") // the real result's dedup id stays free
	if _, err := w.js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	if r, ok := w.storedResult(ctx, in); ok || w.forged.Load() != 1 {
		t.Fatalf("a planted result counted: %+v %v (refused %d)", r, ok, w.forged.Load())
	}
	if err := w.publish(in, events.ResultData{Tool: "peek", Status: events.StatusOK, Output: "real"}, false, nil); err != nil {
		t.Fatal(err)
	}
	if r, ok := w.storedResult(ctx, in); !ok || r.Output != "real" {
		t.Fatalf("the signed result: %+v %v", r, ok)
	}
	// ann's real result, stored again for bob's call of the same id.
	raw, err := w.results.GetLastMsgForSubject(ctx, events.ResultSubject("ann", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	moved := &nats.Msg{Subject: events.ResultSubject("bob", "c1"), Header: raw.Header, Data: raw.Data}
	moved.Header.Set(events.HeaderMsgID, "moved")
	if _, err := w.js.PublishMsg(ctx, moved); err != nil {
		t.Fatal(err)
	}
	other := &events.Call{ID: "c1", Agent: "bob", Tool: "peek", Mode: events.Binary}
	if r, ok := w.storedResult(ctx, other); ok || w.forged.Load() != 2 {
		t.Fatalf("bob's call of the same id took ann's result: %+v", r)
	}
}
