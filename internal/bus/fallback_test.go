package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestStreamRefusingSchedulesIsProvisionedWithout: a calls stream the
// server refuses with message schedules (here: with discard new, which
// schedules cannot use) is provisioned without them, without their
// subject and without roll-ups, and Schedules says so: the workers then
// send calls over their bounds back with delayed naks.
func TestStreamRefusingSchedulesIsProvisionedWithout(t *testing.T) {
	s := testenv.StartNATS(t, "")
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := Config{}.Streams()[0]
	sc.Discard = jetstream.DiscardNew
	if _, err := js.CreateStream(ctx, sc); err == nil {
		t.Fatal("the server took schedules with discard new")
	}
	if err := ensureStream(ctx, js, sc); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, sc.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := st.CachedInfo().Config
	if Schedules(got) || got.AllowMsgSchedules || got.AllowRollup || len(got.Subjects) != 1 {
		t.Fatalf("provisioned: schedules %v, roll-ups %v, subjects %v; want none and the calls' subject", got.AllowMsgSchedules, got.AllowRollup, got.Subjects)
	}
}
