package tools_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/pkg/tools"
)

type msg struct{ stream, chunk string }

type sink struct {
	mu   sync.Mutex
	msgs []msg
}

func (s *sink) out(stream, chunk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, msg{stream, chunk})
}

func (s *sink) all() []msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]msg(nil), s.msgs...)
}

func joined(ms []msg, stream string) string {
	var b strings.Builder
	for _, m := range ms {
		if m.stream == stream {
			b.WriteString(m.chunk)
		}
	}
	return b.String()
}

// TestProgressLimiterBoundsAChattyTool: 20,000 small writes leave as few
// messages as the rate allows, none over MaxBytes, all of the output in
// order.
func TestProgressLimiterBoundsAChattyTool(t *testing.T) {
	var s sink
	l := tools.ProgressLimit{PerSecond: 5, MaxBytes: 4096, Backlog: 1 << 20}
	lim := tools.NewProgressLimiter(s.out, l)
	start := time.Now()
	var want strings.Builder
	for i := range 20000 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		lim.Write(tools.StreamStdout, line)
	}
	lim.Close()
	elapsed := time.Since(start)
	ms := s.all()
	if got := joined(ms, tools.StreamStdout); got != want.String() {
		t.Fatalf("streamed %d bytes, want the %d written, in order", len(got), want.Len())
	}
	// While writing: at most PerSecond a second (and the first at once);
	// at Close: what waited, in MaxBytes pieces.
	bound := int(elapsed.Seconds()*float64(l.PerSecond)) + 1 + (want.Len()+l.MaxBytes-1)/l.MaxBytes + 1
	if len(ms) > bound {
		t.Fatalf("%d messages for %d bytes in %s, bound %d", len(ms), want.Len(), elapsed, bound)
	}
	for i, m := range ms {
		if len(m.chunk) > l.MaxBytes {
			t.Fatalf("message %d has %d bytes, more than %d", i, len(m.chunk), l.MaxBytes)
		}
	}
	if len(ms) >= 20000/10 {
		t.Fatalf("%d messages: chunks were not coalesced", len(ms))
	}
}

func TestProgressLimiterCutsOnRunesAndKeepsStreamsApart(t *testing.T) {
	var s sink
	lim := tools.NewProgressLimiter(s.out, tools.ProgressLimit{PerSecond: 1, MaxBytes: 7})
	lim.Write(tools.StreamStdout, "a")
	lim.Write(tools.StreamStdout, strings.Repeat("é", 20))
	lim.Write(tools.StreamStderr, "err\n")
	lim.Write(tools.StreamStdout, "z")
	lim.Close()
	lim.Write(tools.StreamStdout, "after close")
	ms := s.all()
	var order []string
	for i, m := range ms {
		if !utf8.ValidString(m.chunk) || len(m.chunk) > 7 {
			t.Fatalf("message %d = %q: cut inside a rune or over 7 bytes", i, m.chunk)
		}
		if len(order) == 0 || order[len(order)-1] != m.stream {
			order = append(order, m.stream)
		}
	}
	if got := joined(ms, tools.StreamStdout); got != "a"+strings.Repeat("é", 20)+"z" {
		t.Fatalf("stdout %q", got)
	}
	if strings.Join(order, ",") != "stdout,stderr,stdout" || joined(ms, tools.StreamStderr) != "err\n" {
		t.Fatalf("streams in order %v, stderr %q", order, joined(ms, tools.StreamStderr))
	}
}

// TestProgressLimiterBacklogLeavesANote: beyond the backlog the oldest
// waiting output is left out, a note in its place, and the newest is sent.
func TestProgressLimiterBacklogLeavesANote(t *testing.T) {
	var s sink
	lim := tools.NewProgressLimiter(s.out, tools.ProgressLimit{PerSecond: 1, MaxBytes: 16, Backlog: 64})
	lim.Write(tools.StreamStdout, "first\n") // leaves at once
	lim.Write(tools.StreamStdout, strings.Repeat("x", 1000))
	lim.Write(tools.StreamStdout, "last\n") // the oldest waiting output makes room
	lim.Close()
	got := joined(s.all(), tools.StreamStdout)
	want := "first\n" + "\n... [941 bytes not streamed: the output came faster than progress is sent; the result keeps it] ...\n" + strings.Repeat("x", 59) + "last\n"
	if got != want {
		t.Fatalf("streamed %q\nwant     %q", got, want)
	}
}

// TestProgressMiddleware: every message of a call is handed over before
// the handler returns, so before the result is published.
func TestProgressMiddleware(t *testing.T) {
	var s sink
	h := tools.Chain(tools.HandlerFunc(func(_ context.Context, c *tools.Call) (*tools.Output, error) {
		if c.Progress == nil {
			return nil, errors.New("no progress sink")
		}
		for i := range 100 {
			c.Progress(tools.StreamStdout, fmt.Sprintf("%d\n", i))
		}
		c.Progress(tools.StreamStatus, "done\n")
		return &tools.Output{Content: "ok"}, nil
	}), tools.ProgressLimit{PerSecond: 2}.Middleware())
	if _, err := h.Handle(context.Background(), &tools.Call{Progress: s.out}); err != nil {
		t.Fatal(err)
	}
	ms := s.all()
	if n := len(ms); n == 0 || ms[n-1].stream != tools.StreamStatus || ms[n-1].chunk != "done\n" {
		t.Fatalf("messages after the handler returned: %v", ms)
	}
	if !strings.HasPrefix(joined(ms, tools.StreamStdout), "0\n1\n2\n") || !strings.HasSuffix(joined(ms, tools.StreamStdout), "98\n99\n") {
		t.Fatalf("stdout %q", joined(ms, tools.StreamStdout))
	}
	// Without a progress sink the middleware adds none.
	if _, err := h.Handle(context.Background(), &tools.Call{}); err == nil {
		t.Fatal("the middleware gave a call without a progress sink one")
	}
}
