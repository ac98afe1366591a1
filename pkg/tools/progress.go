package tools

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"
)

// Progress streams: what a tool hands to Call.Progress. A tool may use any
// stream name; these are the ones the built-in tools use.
const (
	// StreamStdout is a command's standard output.
	StreamStdout = "stdout"
	// StreamStderr is a command's standard error.
	StreamStderr = "stderr"
	// StreamStatus is a tool's own note on how far it got (files
	// scanned, bytes fetched, a sub-task's step), one line per message.
	StreamStatus = "status"
)

// Defaults of ProgressLimit's zero fields.
const (
	DefaultProgressPerSecond = 10
	DefaultProgressMaxBytes  = 16 << 10
	DefaultProgressBacklog   = 256 << 10
)

// ProgressLimit bounds what one call streams through Call.Progress, for
// every tool alike: chunks are coalesced (consecutive chunks of one stream
// become one message), at most PerSecond messages a second leave, each of
// at most MaxBytes bytes, cut on UTF-8 boundaries. What a slow rate leaves
// waiting is bounded by Backlog; beyond it, the oldest waiting output is
// left out of the stream (never out of the result), so that what is sent
// stays recent, and a note in its place says how much.
// When the tool returns, what is still waiting is sent at once, so every
// message of a call precedes its result.
type ProgressLimit struct {
	// PerSecond bounds the messages of one call per second; default
	// DefaultProgressPerSecond.
	PerSecond int `yaml:"per_second,omitempty" json:"per_second,omitempty"`
	// MaxBytes bounds the chunk of one message; default
	// DefaultProgressMaxBytes.
	MaxBytes int `yaml:"max_bytes,omitempty" json:"max_bytes,omitempty"`
	// Backlog bounds the bytes waiting to be sent; default
	// DefaultProgressBacklog.
	Backlog int `yaml:"backlog,omitempty" json:"backlog,omitempty"`
}

func (l ProgressLimit) withDefaults() ProgressLimit {
	if l.PerSecond <= 0 {
		l.PerSecond = DefaultProgressPerSecond
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultProgressMaxBytes
	}
	l.MaxBytes = max(l.MaxBytes, utf8.UTFMax)
	if l.Backlog <= 0 {
		l.Backlog = DefaultProgressBacklog
	}
	l.Backlog = max(l.Backlog, l.MaxBytes)
	return l
}

// Middleware bounds the progress of every call that passes: the tool's
// Call.Progress is replaced by a limiter in front of it for the tool's run,
// and what waits is flushed when the tool returns.
func (l ProgressLimit) Middleware() Middleware {
	l = l.withDefaults()
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
			if c.Progress == nil {
				return next.Handle(ctx, c)
			}
			lim := NewProgressLimiter(c.Progress, l)
			c.Progress = lim.Write
			defer lim.Close()
			return next.Handle(ctx, c)
		})
	}
}

// ProgressLimiter is one call's limiter (see ProgressLimit). Write never
// blocks on the consumer for longer than one message takes to hand over.
type ProgressLimiter struct {
	out   func(stream, chunk string)
	l     ProgressLimit
	every time.Duration

	send sync.Mutex // held while a message is handed over: keeps them in order

	mu     sync.Mutex
	queue  []segment
	queued int       // bytes in queue
	last   time.Time // when the last message left
	timer  *time.Timer
	closed bool
	dead   bool // out panicked: nothing more is sent
}

// segment is one stream's coalesced output, or (dropped > 0) the note that
// so many bytes of it were left out.
type segment struct {
	stream  string
	b       []byte
	dropped int64
}

// NewProgressLimiter returns a limiter handing messages to out within l.
func NewProgressLimiter(out func(stream, chunk string), l ProgressLimit) *ProgressLimiter {
	l = l.withDefaults()
	return &ProgressLimiter{out: out, l: l, every: time.Second / time.Duration(l.PerSecond)}
}

// Write queues chunk of stream. It sends a message now if the rate allows,
// else leaves it to a timer.
func (p *ProgressLimiter) Write(stream, chunk string) {
	if chunk == "" {
		return
	}
	p.mu.Lock()
	if p.closed || p.dead {
		p.mu.Unlock()
		return
	}
	p.enqueue(stream, []byte(chunk))
	wait := p.every - time.Since(p.last)
	if wait > 0 {
		p.trim()
		if p.timer == nil {
			p.timer = time.AfterFunc(wait, p.tick)
		}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.emit(false) // the head of what came leaves first, then the rest is bounded
	p.mu.Lock()
	p.trim()
	p.mu.Unlock()
	p.rearm()
}

// rearm arms the timer while output waits.
func (p *ProgressLimiter) rearm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed && !p.dead && len(p.queue) > 0 && p.timer == nil {
		p.timer = time.AfterFunc(max(p.every-time.Since(p.last), 0), p.tick)
	}
}

func (p *ProgressLimiter) enqueue(stream string, b []byte) {
	if len(b) == 0 {
		return
	}
	if n := len(p.queue); n > 0 && p.queue[n-1].stream == stream && p.queue[n-1].dropped == 0 {
		p.queue[n-1].b = append(p.queue[n-1].b, b...)
	} else {
		p.queue = append(p.queue, segment{stream: stream, b: append([]byte(nil), b...)})
	}
	p.queued += len(b)
}

// trim leaves out the oldest waiting output beyond Backlog, so that what
// is sent stays recent (the end of a command's output arrives before its
// result); a note takes the place of what was left out.
func (p *ProgressLimiter) trim() {
	for p.queued > p.l.Backlog {
		i := 0
		for p.queue[i].dropped > 0 {
			i++
		}
		s := &p.queue[i]
		k := min(p.queued-p.l.Backlog, len(s.b))
		for k < len(s.b) && !utf8.RuneStart(s.b[k]) {
			k++
		}
		s.b = s.b[k:]
		p.queued -= k
		stream, empty := s.stream, len(s.b) == 0
		if empty {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
		}
		switch {
		case i > 0 && p.queue[i-1].dropped > 0 && p.queue[i-1].stream == stream:
			p.queue[i-1].dropped += int64(k)
		case empty && i < len(p.queue) && p.queue[i].dropped > 0 && p.queue[i].stream == stream:
			p.queue[i].dropped += int64(k)
		default:
			p.queue = append(p.queue[:i], append([]segment{{stream: stream, dropped: int64(k)}}, p.queue[i:]...)...)
		}
	}
}

// tick sends one message and arms the timer again while output waits.
func (p *ProgressLimiter) tick() {
	p.mu.Lock()
	p.timer = nil
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	p.emit(false)
	p.rearm()
}

// emit sends the next message if the rate allows, or every waiting
// message when all.
func (p *ProgressLimiter) emit(all bool) {
	p.send.Lock()
	defer p.send.Unlock()
	for {
		p.mu.Lock()
		if len(p.queue) == 0 || p.dead || (!all && time.Since(p.last) < p.every) {
			p.mu.Unlock()
			return
		}
		stream, chunk := p.next()
		p.last = time.Now()
		p.mu.Unlock()
		p.hand(stream, chunk)
		if !all {
			return
		}
	}
}

// next takes the next message off the queue: at most MaxBytes of the first
// segment, or its note.
func (p *ProgressLimiter) next() (string, string) {
	s := &p.queue[0]
	if s.dropped > 0 {
		note := fmt.Sprintf("\n... [%d bytes not streamed: the output came faster than progress is sent; the result keeps it] ...\n", s.dropped)
		p.queue = p.queue[1:]
		return s.stream, note
	}
	n := min(len(s.b), p.l.MaxBytes)
	for n < len(s.b) && n > 0 && !utf8.RuneStart(s.b[n]) {
		n--
	}
	if n == 0 {
		n = min(len(s.b), p.l.MaxBytes)
	}
	chunk := string(s.b[:n])
	s.b = s.b[n:]
	p.queued -= n
	stream := s.stream
	if len(s.b) == 0 {
		p.queue = p.queue[1:]
	}
	return stream, chunk
}

func (p *ProgressLimiter) hand(stream, chunk string) {
	defer func() {
		if r := recover(); r != nil {
			p.mu.Lock()
			p.dead = true
			p.mu.Unlock()
		}
	}()
	p.out(stream, chunk)
}

// Close sends everything still waiting, then drops whatever is written
// later (a tool that outlived its call).
func (p *ProgressLimiter) Close() {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.mu.Unlock()
	p.emit(true)
}
