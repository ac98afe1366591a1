package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	follow := fs.Bool("follow", false, "keep printing new events (and live progress) until interrupted")
	since := fs.Duration("since", 15*time.Minute, "start with events stored this long ago")
	asJSON := fs.Bool("json", false, "print one JSON object per event")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
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
	start := time.Now().Add(-*since)
	var wg sync.WaitGroup
	errs := make(chan error, len(eventStreams))
	for _, name := range eventStreams {
		cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start,
		})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // nothing provisioned yet
		}
		if err != nil {
			return env.fail(ExitNoReach, "read %s: %v", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- drain(ctx, cons, *follow, print)
		}()
	}
	if *follow {
		sub, err := nc.Subscribe(events.SubjectProgress, func(m *nats.Msg) { print(m.Subject, m.Header, m.Data) })
		if err == nil {
			defer sub.Unsubscribe()
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

// drain prints what cons delivers: until caught up, or until ctx ends when
// following.
func drain(ctx context.Context, cons jetstream.Consumer, follow bool, print func(string, nats.Header, []byte)) error {
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	pending := info.NumPending
	if !follow && pending == 0 {
		return nil
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
		print(m.Subject(), m.Headers(), m.Data())
		if !follow {
			meta, err := m.Metadata()
			if err != nil || meta.NumPending == 0 {
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
