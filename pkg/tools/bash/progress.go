package bash

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// Progress streaming: output is coalesced into chunks of at most
// chunkSize bytes, sent when that much is pending or every flushEvery.
// At most pendingMax bytes per stream wait for a slow consumer; beyond
// that, output is left out of the stream (never out of the result) and a
// note says how much.
const (
	chunkSize  = 8 << 10
	pendingMax = 256 << 10
	flushEvery = 100 * time.Millisecond
)

// DefaultMaxProgress is how many bytes of output one call streams to
// Call.Progress when Config.MaxProgress is zero.
const DefaultMaxProgress = 1 << 20

// Stream names handed to Call.Progress.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

var streamNames = [2]string{Stdout, Stderr}

// pump hands output to a Call.Progress function from its own goroutine,
// so that the command's readers never wait for the consumer.
type pump struct {
	fn    func(stream, chunk string)
	log   *slog.Logger
	limit int64 // bytes streamed per call; <= 0 unbounded

	mu       sync.Mutex
	pending  [2][]byte
	dropped  [2]int64
	accepted int64 // bytes queued so far
	capped   bool  // limit reached
	noted    bool  // the cap's note was sent; only the pump goroutine touches it

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	dead bool // fn panicked; only the pump goroutine touches it
}

func newPump(fn func(stream, chunk string), limit int64, log *slog.Logger) *pump {
	p := &pump{fn: fn, limit: limit, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// write queues b of stream i (0 stdout, 1 stderr). It never blocks on the
// consumer.
func (p *pump) write(i int, b []byte) {
	p.mu.Lock()
	if p.limit > 0 {
		if left := max(p.limit-p.accepted, 0); int64(len(b)) > left {
			p.capped = true
			b = b[:left]
		}
	}
	if room := pendingMax - len(p.pending[i]); len(b) > room {
		p.dropped[i] += int64(len(b) - room)
		b = b[:room]
	}
	p.accepted += int64(len(b))
	p.pending[i] = append(p.pending[i], b...)
	full := len(p.pending[i]) >= chunkSize
	p.mu.Unlock()
	if full {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// close flushes what is pending and stops the pump. It waits for the
// consumer up to grace, or without bound when grace is zero.
func (p *pump) close(grace time.Duration) {
	close(p.stop)
	if grace <= 0 {
		<-p.done
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.log.Warn("progress consumer still busy after the command ended; not waiting for it", "grace", grace)
	}
}

func (p *pump) run() {
	defer close(p.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		final := false
		select {
		case <-p.wake:
		case <-t.C:
		case <-p.stop:
			final = true
		}
		p.flush(final)
		if final {
			return
		}
	}
}

// flush sends what is pending, keeping an incomplete UTF-8 sequence at the
// end for the next round unless final.
func (p *pump) flush(final bool) {
	for i := range p.pending {
		p.mu.Lock()
		b := p.pending[i]
		keep := 0
		if !final {
			keep = incompleteTail(b)
		}
		data := string(b[:len(b)-keep])
		p.pending[i] = append(b[:0], b[len(b)-keep:]...)
		dropped := p.dropped[i]
		p.dropped[i] = 0
		p.mu.Unlock()
		for len(data) > 0 {
			n := min(len(data), chunkSize)
			for n < len(data) && n > 0 && !utf8.RuneStart(data[n]) {
				n--
			}
			if n == 0 {
				n = min(len(data), chunkSize)
			}
			p.emit(i, data[:n])
			data = data[n:]
		}
		if dropped > 0 {
			p.emit(i, fmt.Sprintf("\n... [%d bytes not streamed: the progress consumer fell behind; the result keeps head and tail] ...\n", dropped))
		}
	}
	p.mu.Lock()
	capped := p.capped
	p.mu.Unlock()
	if capped && !p.noted {
		p.noted = true
		p.emit(0, fmt.Sprintf("\n... [streaming stopped after %d bytes; the result keeps head and tail] ...\n", p.limit))
	}
}

func (p *pump) emit(i int, chunk string) {
	if p.dead {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			p.dead = true
			p.log.Error("progress consumer panicked; streaming stopped for this call", "panic", r)
		}
	}()
	p.fn(streamNames[i], chunk)
}

// incompleteTail is how many bytes at the end of b begin a UTF-8 sequence
// that is not complete yet.
func incompleteTail(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if !utf8.RuneStart(c) {
			continue
		}
		need := 0
		switch {
		case c >= 0xF0:
			need = 4
		case c >= 0xE0:
			need = 3
		case c >= 0xC0:
			need = 2
		default:
			need = 1
		}
		if need > k {
			return k
		}
		return 0
	}
	return 0
}
