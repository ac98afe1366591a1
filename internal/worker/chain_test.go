package worker

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestChainOpensAnchoredAndCloses: each worker run's chain opens with a
// checkpoint anchored to the last one the stream holds (the run
// before's) and closes with a final checkpoint, even a run that audited
// nothing, so that --verify tells its end from a lost tail.
func TestChainOpensAnchoredAndCloses(t *testing.T) {
	s := testenv.StartNATS(t, "")
	var ctr counter
	for range 2 {
		r := startWorker(t, s.ClientURL(), testRegistry(t, &ctr, nil), Config{Bus: fastBus})
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	_, js := s.Connect(t)
	cons, err := js.OrderedConsumer(ctxT(t), bus.StreamAudit, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AuditCheckpointSubject(">")}})
	if err != nil {
		t.Fatal(err)
	}
	var cps []events.AuditCheckpointData
	for range 4 {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("checkpoints %+v: %v", cps, err)
		}
		var cp events.AuditCheckpointData
		if _, err := events.DecodeData(m.Headers(), m.Data(), &cp); err != nil {
			t.Fatal(err)
		}
		cps = append(cps, cp)
	}
	first, second := cps[0].Chain, cps[2].Chain
	switch {
	case !cps[0].Opening || cps[0].Anchor != "" || cps[0].Seq != 0:
		t.Fatalf("first run's opening %+v", cps[0])
	case !cps[1].Final || cps[1].Chain != first || cps[1].Seq != 0:
		t.Fatalf("first run's closing %+v", cps[1])
	case !cps[2].Opening || second == first || cps[2].Anchor != first+":0:" || cps[2].AnchorTime.IsZero():
		t.Fatalf("second run's opening %+v, want it anchored to %s", cps[2], first)
	case !cps[3].Final || cps[3].Chain != second:
		t.Fatalf("second run's closing %+v", cps[3])
	}
}
