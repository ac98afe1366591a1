package bash

import (
	"math/bits"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/toolgate/toolgate/pkg/tools"
)

// capture keeps a bounded view of one output stream while it is written:
// the first bytes in head, the last bytes in a ring, and counts of all
// bytes and characters seen. Its memory is fixed by the character bound it
// was made for, however much the command prints. It is not safe for
// concurrent use.
type capture struct {
	headCap int
	head    []byte
	ring    []byte // allocated on the first byte past head
	ringLen int    // valid bytes in ring
	pos     int    // next write index in ring
	bytes   int64  // bytes seen
	runes   int64  // characters seen (UTF-8 sequence starts)
}

// newCapture returns a capture that can render up to maxRunes characters
// with head and tail on either side of a cut: each side holds four bytes
// per character of half the bound, so even text of four-byte characters
// is kept whole.
func newCapture(maxRunes int) *capture {
	if maxRunes <= 0 {
		maxRunes = tools.DefaultMaxOutput
	}
	return &capture{headCap: 4*(maxRunes/2+1) + utf8.UTFMax}
}

// Write records p. It never fails; the io.Writer shape is for tests.
func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.bytes += int64(n)
	c.runes += runeCount(p)
	if c.head == nil && len(p) > 0 {
		c.head = make([]byte, 0, c.headCap)
	}
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if c.ring == nil {
		c.ring = make([]byte, c.headCap)
	}
	if len(p) >= len(c.ring) {
		copy(c.ring, p[len(p)-len(c.ring):])
		c.pos, c.ringLen = 0, len(c.ring)
		return n, nil
	}
	k := copy(c.ring[c.pos:], p)
	copy(c.ring, p[k:])
	c.pos = (c.pos + len(p)) % len(c.ring)
	c.ringLen = min(c.ringLen+len(p), len(c.ring))
	return n, nil
}

// tail returns the ring's bytes in order.
func (c *capture) tail() []byte {
	if c.ringLen < len(c.ring) {
		return c.ring[:c.ringLen]
	}
	return append(append([]byte(nil), c.ring[c.pos:]...), c.ring[:c.pos]...)
}

// lost reports whether bytes between head and tail were dropped.
func (c *capture) lost() bool { return c.bytes > int64(len(c.head)+c.ringLen) }

// render returns the stream bounded to limit characters the way
// tools.Truncate bounds a string (head and tail kept, cut on a line
// boundary when one lies near, tools.Marker in the middle), with invalid
// UTF-8 replaced, and how many characters were cut.
func (c *capture) render(limit int) (string, int) {
	if !c.lost() {
		s := strings.ToValidUTF8(string(c.head)+string(c.tail()), "\uFFFD")
		return tools.Truncate(s, limit)
	}
	budget := limit - 64 // room for the marker, as in tools.Truncate
	if budget < 2 {
		budget = limit
	}
	head := runePrefix(c.head, budget/2)
	tail := runeSuffix(c.tail(), budget-budget/2)
	if i := strings.LastIndexByte(head, '\n'); i >= 0 && i >= len(head)*3/4 {
		head = head[:i+1]
	}
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i <= len(tail)/4 {
		tail = tail[i+1:]
	}
	cut := max(int(c.runes-runeCount([]byte(head))-runeCount([]byte(tail))), 0)
	return strings.ToValidUTF8(head, "\uFFFD") + tools.Marker(cut) + strings.ToValidUTF8(tail, "\uFFFD"), cut
}

// runePrefix is the first n characters of b.
func runePrefix(b []byte, n int) string {
	i := 0
	for ; n > 0 && i < len(b); n-- {
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return string(b[:i])
}

// runeSuffix is the last n characters of b.
func runeSuffix(b []byte, n int) string {
	i := len(b)
	for ; n > 0 && i > 0; n-- {
		_, size := utf8.DecodeLastRune(b[:i])
		i -= size
	}
	return string(b[i:])
}

// runeCount counts the bytes of p that are not UTF-8 continuation bytes
// (10xxxxxx): the number of characters of valid UTF-8, whatever the
// chunk boundaries, and close to it for anything else. It reads aligned
// words eight bytes at a time, because a command may print gigabytes
// through it.
func runeCount(p []byte) int64 {
	var n int64
	// Bytes before the first aligned word, and the words.
	head := 0
	if len(p) > 0 {
		head = min(int((8-uintptr(unsafe.Pointer(&p[0]))%8)%8), len(p))
	}
	n += slowCount(p[:head])
	p = p[head:]
	words := len(p) / 8
	if words > 0 {
		for _, w := range unsafe.Slice((*uint64)(unsafe.Pointer(&p[0])), words) {
			// A continuation byte has bit 7 set and bit 6 clear.
			cont := w & ^(w << 1) & 0x8080808080808080
			n += int64(8 - bits.OnesCount64(cont))
		}
	}
	return n + slowCount(p[words*8:])
}

func slowCount(p []byte) int64 {
	var n int64
	for _, b := range p {
		if b&0xC0 != 0x80 {
			n++
		}
	}
	return n
}
