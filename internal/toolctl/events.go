package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/events"
)

// eventStreams are the streams `toolctl events` reads (see internal/bus).
var eventStreams = []string{"TOOLGATE_RESULTS", "TOOLGATE_EVENTS", "TOOLGATE_AUDIT", "TOOLGATE_APPROVALS"}

// EventLine is one printed event in --json mode.
type EventLine struct {
	Time    time.Time       `json:"time"`
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

func cmdEvents(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("events", "usage: toolctl events [--since D] [--follow | --new] [--json]\n"+
		"prints the events stored in the last --since (15m) oldest first; with --follow it first replays those, then prints new ones as they come; with --new only events from now on")
	follow := fs.Bool("follow", false, "replay the stored events of the last --since first, then keep printing new events (and live progress) until interrupted")
	newOnly := fs.Bool("new", false, "skip the stored events: print only events from now on (and live progress) until interrupted")
	since := fs.Duration("since", 15*time.Minute, "start with events stored this long ago (not with --new)")
	asJSON := fs.Bool("json", false, "print one JSON object per event")
	words, err := parseFlags(fs, args)
	if err != nil {
		return usageCode(err)
	}
	if len(words) > 0 {
		return env.fail(ExitUsage, "events: unexpected argument %q", words[0])
	}
	if *newOnly && *follow {
		return env.fail(ExitUsage, "events: --new and --follow: choose one (--follow replays the stored events first, --new skips them)")
	}
	*follow = *follow || *newOnly
	nc, js, code := env.jetStream()
	if js == nil {
		return code
	}
	defer nc.Close()
	var mu sync.Mutex
	print := func(subject string, h nats.Header, data []byte) {
		ev, _, err := events.Decode(h, data)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fmt.Fprintf(env.Stdout, "%s (undecodable: %v)\n", subject, err)
			return
		}
		line := EventLine{Time: ev.Time(), Type: ev.Type(), ID: ev.ID(), Subject: subject, Data: ev.Data()}
		if *asJSON {
			b, _ := json.Marshal(line)
			fmt.Fprintln(env.Stdout, string(b))
			return
		}
		fmt.Fprintf(env.Stdout, "%s %s %s %s\n", line.Time.UTC().Format(time.RFC3339Nano), line.Type, subject, compact(line.Data))
	}
	// Each stream is read up to where it stands now; the stored events of
	// all streams are printed together, oldest first. Following, each
	// stream then prints what comes next as it comes.
	start := time.Now().Add(-*since)
	replayed := make(chan struct{})
	var (
		wg, caughtUp sync.WaitGroup
		stored       []storedEvent
		storedMu     sync.Mutex
	)
	errs := make(chan error, len(eventStreams))
	for i, name := range eventStreams {
		cc := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start}
		if *newOnly {
			cc = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
		}
		cons, err := js.OrderedConsumer(ctx, name, cc)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // nothing provisioned yet
		}
		if err != nil {
			close(replayed)
			return env.fail(ExitNoReach, "read %s: %v", name, err)
		}
		wg.Add(1)
		caughtUp.Add(1)
		go func() {
			defer wg.Done()
			once := sync.OnceFunc(caughtUp.Done)
			defer once()
			keep := func(m jetstream.Msg) {
				e := storedEvent{stream: i, subject: m.Subject(), header: m.Headers(), data: m.Data()}
				if meta, err := m.Metadata(); err == nil {
					e.seq, e.stored = meta.Sequence.Stream, meta.Timestamp
				}
				if ev, _, err := events.Decode(m.Headers(), m.Data()); err == nil {
					e.time = ev.Time()
				}
				storedMu.Lock()
				stored = append(stored, e)
				storedMu.Unlock()
			}
			live := func(m jetstream.Msg) {
				once()
				<-replayed
				print(m.Subject(), m.Headers(), m.Data())
			}
			errs <- drain(ctx, cons, *follow, keep, live, once)
		}()
	}
	caughtUp.Wait()
	sortEvents(stored)
	for _, e := range stored {
		print(e.subject, e.header, e.data)
	}
	close(replayed)
	if *follow {
		sub, err := nc.Subscribe(events.SubjectProgress, func(m *nats.Msg) { print(m.Subject, m.Header, m.Data) })
		if err == nil {
			defer sub.Unsubscribe()
		}
		// Where the replay ends, on stderr (stdout stays events only).
		if *newOnly {
			fmt.Fprintln(env.Stderr, "events: printing new events as they come (Ctrl-C stops)")
		} else {
			fmt.Fprintf(env.Stderr, "events: replayed %d stored events of the last %s; printing new ones as they come (Ctrl-C stops)\n", len(stored), *since)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return env.fail(ExitNoReach, "%v", err)
		}
	}
	return ExitOK
}

// storedEvent is an event read back from a stream, kept until every
// stream is read so they print in order.
type storedEvent struct {
	stream  int
	seq     uint64
	time    time.Time // the event's own time
	stored  time.Time // when the stream stored it
	subject string
	header  nats.Header
	data    []byte
}

// sortEvents orders events oldest first by their own time, then by when
// they were stored, then by stream and sequence, so the same events always
// print in the same order.
func sortEvents(es []storedEvent) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		switch {
		case !a.time.Equal(b.time):
			return a.time.Before(b.time)
		case !a.stored.Equal(b.stored):
			return a.stored.Before(b.stored)
		case a.stream != b.stream:
			return a.stream < b.stream
		}
		return a.seq < b.seq
	})
}

// drain reads what cons delivers: stored messages (those pending when it
// starts) go to keep, then caughtUp is called; when following, newer
// messages go to live until ctx ends.
func drain(ctx context.Context, cons jetstream.Consumer, follow bool, keep, live func(jetstream.Msg), caughtUp func()) error {
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	pending := info.NumPending
	if pending == 0 {
		caughtUp()
		if !follow {
			return nil
		}
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			return err
		}
		if pending == 0 {
			live(m)
			continue
		}
		keep(m)
		meta, err := m.Metadata()
		if err != nil || meta.NumPending == 0 {
			pending = 0
			caughtUp()
			if !follow {
				return nil
			}
		}
	}
}

func compact(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
