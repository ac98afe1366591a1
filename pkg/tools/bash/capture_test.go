package bash

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/pkg/tools"
)

// write feeds s to c in chunks of n bytes, cutting UTF-8 sequences apart
// the way pipe reads do.
func write(c *capture, s string, n int) {
	for len(s) > 0 {
		k := min(n, len(s))
		c.Write([]byte(s[:k]))
		s = s[k:]
	}
}

func TestCaptureMatchesTruncateWhenNothingIsLost(t *testing.T) {
	line := "héllo wörld, 你好 🙂\n"
	tests := []struct {
		name  string
		input string
		max   int
	}{
		{"empty", "", 100},
		{"fits", "hello\n", 100},
		{"exactly the bound", strings.Repeat("a", 100), 100},
		{"one over", strings.Repeat("a", 101), 100},
		{"lines", strings.Repeat(line, 10), 100},
		{"multibyte no newline", strings.Repeat("你好", 30), 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{1, 3, 7, 4096} {
				c := newCapture(tt.max)
				write(c, tt.input, chunk)
				if c.lost() {
					t.Fatalf("chunk %d: lost bytes of a %d-byte input", chunk, len(tt.input))
				}
				got, gotCut := c.render(tt.max)
				want, wantCut := tools.Truncate(tt.input, tt.max)
				if got != want || gotCut != wantCut {
					t.Errorf("chunk %d: render = %q (%d cut), tools.Truncate = %q (%d cut)", chunk, got, gotCut, want, wantCut)
				}
				if c.bytes != int64(len(tt.input)) || c.runes != int64(utf8.RuneCountInString(tt.input)) {
					t.Errorf("chunk %d: counted %d bytes %d runes, want %d %d", chunk, c.bytes, c.runes, len(tt.input), utf8.RuneCountInString(tt.input))
				}
			}
		})
	}
}

func TestCaptureKeepsHeadAndTailWhenLosing(t *testing.T) {
	const max = 200
	var b strings.Builder
	for i := range 5000 {
		b.WriteString(strings.Repeat("é", i%7))
		b.WriteString("line\n")
	}
	input := "FIRST\n" + b.String() + "LAST\n"
	for _, chunk := range []int{1, 5, 64 << 10} {
		c := newCapture(max)
		write(c, input, chunk)
		if !c.lost() {
			t.Fatalf("chunk %d: nothing lost from %d bytes", chunk, len(input))
		}
		got, cut := c.render(max)
		if !utf8.ValidString(got) {
			t.Fatalf("chunk %d: render is not valid UTF-8", chunk)
		}
		if n := utf8.RuneCountInString(got); n > max {
			t.Errorf("chunk %d: render has %d characters, bound %d", chunk, n, max)
		}
		if !strings.HasPrefix(got, "FIRST\n") || !strings.HasSuffix(got, "LAST\n") {
			t.Errorf("chunk %d: head or tail missing: %q", chunk, got)
		}
		marker := tools.Marker(cut)
		i := strings.Index(got, marker)
		if i < 0 {
			t.Fatalf("chunk %d: no marker %q in %q", chunk, marker, got)
		}
		kept := utf8.RuneCountInString(got) - utf8.RuneCountInString(marker)
		if want := utf8.RuneCountInString(input) - kept; cut != want {
			t.Errorf("chunk %d: marker says %d cut, %d were", chunk, cut, want)
		}
		if head := got[:i]; !strings.HasSuffix(head, "\n") {
			t.Errorf("chunk %d: head not cut on a line boundary: %q", chunk, head)
		}
	}
}

func TestCaptureMemoryIsBoundedByTheLimit(t *testing.T) {
	// 1 GB through the capture in pipe-sized reads: what it holds and
	// what it allocates do not depend on the amount.
	const total = 1 << 30
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	c := newCapture(tools.DefaultMaxOutput)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for n := 0; n < total; n += len(chunk) {
		c.Write(chunk)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("writing 1 GiB allocated %d bytes; want under 1 MiB", alloc)
	}
	if held := cap(c.head) + cap(c.ring); held > 4*tools.DefaultMaxOutput+64 {
		t.Errorf("capture holds %d bytes for a %d-character bound", held, tools.DefaultMaxOutput)
	}
	if c.bytes != total {
		t.Errorf("counted %d bytes, wrote %d", c.bytes, total)
	}
	s, cut := c.render(tools.DefaultMaxOutput)
	if utf8.RuneCountInString(s) > tools.DefaultMaxOutput || cut <= 0 {
		t.Errorf("render: %d characters, %d cut", utf8.RuneCountInString(s), cut)
	}
}

func TestRuneCount(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09\n\t é你🙂\u0080\uffff")
	for range 200 {
		var b strings.Builder
		for range r.IntN(300) {
			b.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		if got, want := runeCount([]byte(s)), int64(utf8.RuneCountInString(s)); got != want {
			t.Fatalf("runeCount(%q) = %d, want %d", s, got, want)
		}
		// Every alignment of the start: the same count of starts as a
		// byte-by-byte loop.
		buf := []byte("1234567" + s)
		for off := range 8 {
			if got, want := runeCount(buf[off:]), slowCount(buf[off:]); got != want {
				t.Fatalf("runeCount at offset %d = %d, byte loop %d", off, got, want)
			}
		}
	}
}

func FuzzCapture(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), 10, 3)
	f.Add([]byte(strings.Repeat("你好🙂\n", 100)), 20, 7)
	f.Add([]byte{0xff, 0xfe, 0xe4, 0xbd, '\n', 0x80}, 2, 1)
	f.Fuzz(func(t *testing.T, data []byte, max, chunk int) {
		if max < 1 || max > 1000 || chunk < 1 {
			// Not a missing program: the fuzzer's way to pass over inputs
			// outside the bounds capture is made for (the worker never
			// asks for them), so that it spends its time on the others.
			t.Skip()
		}
		c := newCapture(max)
		write(c, string(data), chunk)
		got, cut := c.render(max)
		if !utf8.ValidString(got) {
			t.Fatalf("render is not valid UTF-8: %q", got)
		}
		if cut < 0 {
			t.Fatalf("negative cut %d", cut)
		}
		if !c.lost() {
			want, _ := tools.Truncate(strings.ToValidUTF8(string(data), "\uFFFD"), max)
			if got != want {
				t.Fatalf("render %q, Truncate %q", got, want)
			}
			return
		}
		if !strings.Contains(got, tools.Marker(cut)) {
			t.Fatalf("lost bytes but no marker for %d in %q", cut, got)
		}
		if n := utf8.RuneCountInString(got); max >= 66 && n > max {
			t.Fatalf("%d characters for a bound of %d", n, max)
		}
	})
}

func BenchmarkCapture(b *testing.B) {
	chunk := bytes.Repeat([]byte("0123456789abcdé\n"), 3855) // about 64 KB
	c := newCapture(tools.DefaultMaxOutput)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		c.Write(chunk)
	}
}
