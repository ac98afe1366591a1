package bash

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

type chunks struct {
	mu sync.Mutex
	by map[string][]string
}

func (c *chunks) add(stream, chunk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string][]string{}
	}
	c.by[stream] = append(c.by[stream], chunk)
}

func (c *chunks) joined(stream string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.by[stream], "")
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestPumpDeliversEverythingInValidChunks(t *testing.T) {
	out := strings.Repeat("ligne é 你好 🙂\n", 3000)
	errs := strings.Repeat("warn ✗\n", 500)
	var got chunks
	p := newPump(got.add, -1, quiet)
	// Odd write sizes split multibyte characters between writes.
	for i, s := range []string{out, errs} {
		for len(s) > 0 {
			k := min(7, len(s))
			p.write(i, []byte(s[:k]))
			s = s[k:]
		}
	}
	p.close(0)
	if got.joined(Stdout) != out {
		t.Errorf("stdout chunks do not add up to what was written")
	}
	if got.joined(Stderr) != errs {
		t.Errorf("stderr chunks do not add up to what was written")
	}
	for stream, cs := range got.by {
		for _, c := range cs {
			if len(c) > chunkSize {
				t.Errorf("%s chunk of %d bytes, more than %d", stream, len(c), chunkSize)
			}
			if !utf8.ValidString(c) {
				t.Errorf("%s chunk splits a character: %q", stream, c)
			}
		}
	}
}

func TestPumpNeverBlocksOnASlowConsumer(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got strings.Builder
	p := newPump(func(stream, chunk string) {
		<-release // stuck until every write is done
		mu.Lock()
		got.WriteString(chunk)
		mu.Unlock()
	}, -1, quiet)
	block := []byte(strings.Repeat("x", 4096))
	const writes = 1024 // 4 MiB, far beyond what the pump keeps
	for range writes {
		p.write(0, block)
	}
	close(release)
	p.close(0)
	s := got.String()
	if !strings.Contains(s, "bytes not streamed") {
		t.Errorf("no note about output left out of the stream")
	}
	// At most what was pending when the consumer got stuck, plus what
	// piled up while it was.
	if n := strings.Count(s, "x"); n > 2*pendingMax || n == 0 {
		t.Errorf("streamed %d bytes of output, want between 1 and %d", n, 2*pendingMax)
	}
}

func TestPumpStopsAtItsLimit(t *testing.T) {
	var got chunks
	p := newPump(got.add, 10_000, quiet)
	block := []byte(strings.Repeat("z", 1000))
	for range 100 {
		p.write(0, block)
		p.write(1, block)
	}
	p.close(0)
	all := got.joined(Stdout) + got.joined(Stderr)
	if n := strings.Count(all, "z"); n != 10_000 {
		t.Errorf("streamed %d bytes, limit 10000", n)
	}
	if !strings.Contains(all, "streaming stopped after 10000 bytes") {
		t.Errorf("no note that streaming stopped: %q", all[len(all)-200:])
	}
}

func TestPumpSurvivesAPanickingConsumer(t *testing.T) {
	calls := 0
	p := newPump(func(string, string) { calls++; panic("consumer bug") }, -1, quiet)
	p.write(0, []byte("a"))
	p.write(0, []byte("b"))
	p.close(0)
	if calls != 1 {
		t.Errorf("consumer called %d times after panicking, want 1", calls)
	}
}

func TestIncompleteTail(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 0},
		{"é", 0},
		{"a\xc3", 1},
		{"a\xe4\xbd", 2},
		{"\xf0\x9f\x99", 3},
		{"🙂", 0},
		{"\x80\x80", 0},
	}
	for _, tt := range tests {
		if got := incompleteTail([]byte(tt.in)); got != tt.want {
			t.Errorf("incompleteTail(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
