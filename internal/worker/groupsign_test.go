package worker

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
)

// TestGroupSigner signs the final publishes of calls through a
// groupSigner and counts the ed25519 signatures made: calls publishing
// together share one, a call alone (after a pause longer than the pace)
// has its own and waits for nothing (the linger is a minute: a wait would
// time the test out), and every event verifies alone with pkg/eventsig.
// It starts no goroutine.
func TestGroupSigner(t *testing.T) {
	signer, verify, _ := testenv.WorkerSigning(t)
	cases := []struct {
		name       string
		calls      int
		perCall    int // events
		together   bool
		signatures int
	}{
		{"alone", 5, 3, false, 5},
		{"together", 16, 1, true, 1},
		{"together, three events each", 3, 3, true, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			var made atomic.Int32
			sign := eventsig.SignTogether(signer)
			g := newGroupSigner(func(in [][]byte) ([]string, string, error) {
				made.Add(1)
				return sign(in)
			}, time.Minute)
			g.pace = time.Millisecond // alone: calls two paces apart
			if tc.together {
				g.pace = 0 // together: the calls begun are all it waits for
			}
			us := make([][]events.Unsigned, tc.calls)
			for i := range us {
				us[i] = testEvents(t, fmt.Sprintf("%s-%d", strings.ReplaceAll(tc.name, " ", ""), i), tc.perCall)
			}
			msgs := make([][]string, tc.calls) // each call's signatures
			signOne := func(i int) {
				msgs[i] = signCall(t, g, fmt.Sprint(i), us[i], verify)
			}
			if tc.together {
				for i := range tc.calls {
					g.begin(fmt.Sprint(i)) // every call is on its way
				}
				var wg sync.WaitGroup
				for i := range tc.calls {
					wg.Go(func() { signOne(i) })
				}
				wg.Wait()
			} else {
				for i := range tc.calls {
					time.Sleep(2 * g.pace) // a pause: no load
					g.begin(fmt.Sprint(i))
					signOne(i)
					g.done(fmt.Sprint(i)) // as handle returns
				}
			}
			if got := int(made.Load()); got != tc.signatures {
				t.Errorf("%d signatures for %d calls, want %d", got, tc.calls, tc.signatures)
			}
			distinct := map[string]bool{}
			for _, sigs := range msgs {
				for _, s := range sigs {
					raw, _, _ := strings.Cut(s, ".")
					distinct[raw] = true
				}
			}
			if len(distinct) != tc.signatures {
				t.Errorf("events carry %d signatures, want %d", len(distinct), tc.signatures)
			}
			if len(g.calls) != 0 || len(g.queue) != 0 || g.leading {
				t.Errorf("left behind: begun %d, queued %d, leading %v", len(g.calls), len(g.queue), g.leading)
			}
			for range 200 { // the signers' goroutines may still be exiting
				if runtime.NumGoroutine() <= before {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if grown := runtime.NumGoroutine() - before; grown > 0 {
				t.Errorf("%d goroutines left", grown)
			}
		})
	}
}

// TestGroupSignerDoneAndFailure: a begun call that is done without
// signing is not waited for (the linger is a minute), nor is anything by
// a call not begun, and a signature that fails fails its batch's calls
// only.
func TestGroupSignerDoneAndFailure(t *testing.T) {
	signer, verify, _ := testenv.WorkerSigning(t)
	sign := eventsig.SignTogether(signer)
	broken := errors.New("broken key")
	var fail atomic.Bool
	g := newGroupSigner(func(in [][]byte) ([]string, string, error) {
		if fail.Load() {
			return nil, "", broken
		}
		return sign(in)
	}, time.Minute)
	g.pace = 0 // never loaded

	g.begin("a")
	g.begin("b")
	g.done("b")
	signCall(t, g, "a", testEvents(t, "done-beside", 1), verify)
	signCall(t, g, "not-begun", testEvents(t, "not-begun", 2), verify)

	fail.Store(true)
	for i := range 4 {
		g.begin(fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 4 {
		us := testEvents(t, fmt.Sprintf("fails-%d", i), 2)
		wg.Go(func() {
			if _, _, err := g.signTogether(fmt.Sprint(i), inputsOf(us)); errors.Is(err, broken) {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != 4 {
		t.Errorf("%d of 4 calls failed with the broken key", failed.Load())
	}
	fail.Store(false)
	g.begin("c")
	signCall(t, g, "c", testEvents(t, "after-failure", 2), verify)
}

// TestGroupSignerLoaded: calls that come to their signature one after
// another, none begun while another signs (as at many calls in flight,
// each call's own work done between), share signatures once they come
// closer together than the pace: a leader waits the linger for the next.
func TestGroupSignerLoaded(t *testing.T) {
	signer, verify, _ := testenv.WorkerSigning(t)
	sign := eventsig.SignTogether(signer)
	var made atomic.Int32
	g := newGroupSigner(func(in [][]byte) ([]string, string, error) {
		made.Add(1)
		return sign(in)
	}, 50*time.Millisecond)
	g.pace = time.Minute
	const calls = 20
	var wg sync.WaitGroup
	for i := range calls {
		us := testEvents(t, fmt.Sprintf("loaded-%d", i), 2)
		wg.Go(func() { signCall(t, g, fmt.Sprint(i), us, verify) })
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if n := made.Load(); n > calls/2 {
		t.Errorf("%d signatures for %d calls one after another, want at most %d", n, calls, calls/2)
	}
	if len(g.queue) != 0 || g.leading {
		t.Errorf("left behind: queued %d, leading %v", len(g.queue), g.leading)
	}
}

// testEvents encodes n events of a call (a result and audit-like events).
func testEvents(t *testing.T, id string, n int) []events.Unsigned {
	t.Helper()
	us := make([]events.Unsigned, n)
	for i := range us {
		u, err := events.EncodeUnsigned(events.ResultSubject("signs", id), events.Attrs{ID: fmt.Sprintf("%s:%d", id, i),
			Source: events.AgentSource("signs"), Type: events.TypeCallCompleted, Subject: id},
			events.ResultData{Agent: "signs", CallID: id, Status: events.StatusOK}, events.Binary)
		if err != nil {
			t.Fatal(err)
		}
		us[i] = u
	}
	return us
}

func inputsOf(us []events.Unsigned) [][]byte {
	in := make([][]byte, len(us))
	for i := range us {
		in[i] = us[i].Input()
	}
	return in
}

// signCall signs the events of the call key through g, checks that each
// verifies alone and returns their signatures.
func signCall(t *testing.T, g *groupSigner, key string, us []events.Unsigned, verify *eventsig.Verifier) []string {
	sigs, signer, err := g.signTogether(key, inputsOf(us))
	if err != nil {
		t.Error(err)
		return nil
	}
	for i := range us {
		m, err := us[i].Signed(sigs[i], signer)
		if err != nil {
			t.Error(err)
			continue
		}
		ev, _, err := events.Decode(m.Header, m.Data)
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := verify.Verify(ev); err != nil {
			t.Errorf("%s: %v", us[i].ID(), err)
		}
	}
	return sigs
}
