package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// ErrNotCanonicalizable reports JSON that has no single canonical form: it
// does not parse, has trailing data, or repeats a key in one object (which
// readers resolve differently, so a hash over it would not bind one meaning).
var ErrNotCanonicalizable = errors.New("json has no canonical form")

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

// Canonical returns the canonical form of a JSON value: object keys sorted
// by their UTF-8 bytes, no insignificant whitespace, strings re-escaped the
// one way encoding/json writes them (without HTML escaping), and numbers
// exactly as written. Empty input is the empty object.
func Canonical(raw []byte) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("{}"), nil
	}
	if out, ok := canonicalPlain(raw); ok {
		return out, nil
	}
	return canonicalDecoded(raw)
}

// canonicalDecoded is Canonical through encoding/json's tokenizer: any
// JSON, and the error that says where JSON without a canonical form goes
// wrong.
func canonicalDecoded(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b bytes.Buffer
	if err := canonValue(dec, &b, "$", 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the value at offset %d", ErrNotCanonicalizable, dec.InputOffset())
	}
	return b.Bytes(), nil
}

func canonValue(dec *json.Decoder, b *bytes.Buffer, at string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: at %s: nested deeper than %d", ErrNotCanonicalizable, at, maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: at %s: %v", ErrNotCanonicalizable, at, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonObject(dec, b, at, depth)
		case '[':
			b.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				if err := canonValue(dec, b, fmt.Sprintf("%s[%d]", at, i), depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("%w: at %s: %v", ErrNotCanonicalizable, at, err)
			}
			b.WriteByte(']')
			return nil
		}
		return fmt.Errorf("%w: at %s: unexpected %q", ErrNotCanonicalizable, at, t)
	case string:
		writeString(b, t)
	case json.Number:
		b.WriteString(string(t))
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	default:
		return fmt.Errorf("%w: at %s: unexpected token %v", ErrNotCanonicalizable, at, tok)
	}
	return nil
}

func canonObject(dec *json.Decoder, b *bytes.Buffer, at string, depth int) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: at %s: %v", ErrNotCanonicalizable, at, err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%w: at %s: object key is %v", ErrNotCanonicalizable, at, tok)
		}
		if seen[key] {
			return fmt.Errorf("%w: at %s: key %q appears twice", ErrNotCanonicalizable, at, key)
		}
		seen[key] = true
		var vb bytes.Buffer
		if err := canonValue(dec, &vb, at+"."+key, depth+1); err != nil {
			return err
		}
		members = append(members, member{key, vb.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: at %s: %v", ErrNotCanonicalizable, at, err)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, m.key)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return nil
}

// canonicalPlain is Canonical in one pass over raw, for JSON whose strings
// need no re-escaping (no backslash, no control character, valid UTF-8,
// neither U+2028 nor U+2029: their bytes are their canonical form) and
// whose objects repeat no key; ok is false for anything else, valid or
// not, which canonicalDecoded then handles. Arguments almost always are
// such JSON, and this is several times faster than the tokenizer.
func canonicalPlain(raw []byte) (out []byte, ok bool) {
	p := plainScan{in: raw, out: make([]byte, 0, len(raw))}
	p.space()
	if !p.value(0) {
		return nil, false
	}
	p.space()
	if p.i != len(p.in) {
		return nil, false
	}
	return p.out, true
}

// plainScan is canonicalPlain's state: the input, the read offset, the
// canonical output so far.
type plainScan struct {
	in  []byte
	i   int
	out []byte
}

func (p *plainScan) space() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips whitespace and reads the byte after it (a separator or a
// closing bracket); ok is false at the end of the input.
func (p *plainScan) next() (c byte, ok bool) {
	p.space()
	if p.i >= len(p.in) {
		return 0, false
	}
	c = p.in[p.i]
	p.i++
	return c, true
}

func (p *plainScan) value(depth int) bool {
	if depth > maxDepth || p.i >= len(p.in) {
		return false
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, ok := p.str()
		if ok {
			p.out = append(append(append(p.out, '"'), s...), '"')
		}
		return ok
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	}
	return false
}

func (p *plainScan) literal(word string) bool {
	if !bytes.HasPrefix(p.in[p.i:], []byte(word)) {
		return false
	}
	p.i += len(word)
	p.out = append(p.out, word...)
	return true
}

// str reads a string that needs no re-escaping and returns its contents.
func (p *plainScan) str() ([]byte, bool) {
	start := p.i + 1
	for j := start; j < len(p.in); {
		if p.in[j] == '"' {
			p.i = j + 1
			return p.in[start:j], true
		}
		if c := p.in[j]; c < utf8.RuneSelf {
			if !plainASCII[c] {
				return nil, false
			}
			j++
			continue
		}
		r, size := utf8.DecodeRune(p.in[j:])
		if !plainRune(r, size) {
			return nil, false
		}
		j += size
	}
	return nil, false
}

// plainRune reports whether encoding/json writes the rune r, of size bytes
// in the input, as it is inside a string (without HTML escaping): not a
// quote, a backslash or a control character, not an invalid byte, neither
// U+2028 nor U+2029.
func plainRune(r rune, size int) bool {
	return r >= 0x20 && r != '"' && r != '\\' && !(r == utf8.RuneError && size == 1) && r != '\u2028' && r != '\u2029'
}

// plainASCII is plainRune of each ASCII byte, looked up in str's loop.
var plainASCII = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = plainRune(rune(c), 1)
	}
	return t
}()

// number reads a number by JSON's grammar; its canonical form is the
// number as written.
func (p *plainScan) number() bool {
	in, j := p.in, p.i
	digits := func() int {
		k := j
		for j < len(in) && '0' <= in[j] && in[j] <= '9' {
			j++
		}
		return j - k
	}
	if in[j] == '-' {
		j++
	}
	switch {
	case j < len(in) && in[j] == '0':
		j++
	case digits() == 0:
		return false
	}
	if j < len(in) && in[j] == '.' {
		j++
		if digits() == 0 {
			return false
		}
	}
	if j < len(in) && (in[j] == 'e' || in[j] == 'E') {
		j++
		if j < len(in) && (in[j] == '+' || in[j] == '-') {
			j++
		}
		if digits() == 0 {
			return false
		}
	}
	p.out = append(p.out, in[p.i:j]...)
	p.i = j
	return true
}

func (p *plainScan) array(depth int) bool {
	p.i++
	p.out = append(p.out, '[')
	p.space()
	if p.i < len(p.in) && p.in[p.i] == ']' {
		p.i++
		p.out = append(p.out, ']')
		return true
	}
	for {
		if !p.value(depth + 1) {
			return false
		}
		c, ok := p.next()
		if !ok {
			return false
		}
		if c == ']' {
			p.out = append(p.out, ']')
			return true
		}
		if c != ',' {
			return false
		}
		p.out = append(p.out, ',')
		p.space()
	}
}

// plainString reports whether s is written in JSON as it is, between
// quotes.
func plainString(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !plainRune(r, size) {
			return false
		}
		i += size
	}
	return true
}

// plainMember is an object member written to the output: its key and
// where `"key":value` is in the output.
type plainMember struct {
	key      []byte
	from, to int
}

func (p *plainScan) object(depth int) bool {
	p.i++
	p.out = append(p.out, '{')
	start := len(p.out)
	p.space()
	if p.i < len(p.in) && p.in[p.i] == '}' {
		p.i++
		p.out = append(p.out, '}')
		return true
	}
	var buf [8]plainMember
	members, sorted := buf[:0], true
	for {
		if p.i >= len(p.in) || p.in[p.i] != '"' {
			return false
		}
		key, ok := p.str()
		if !ok {
			return false
		}
		p.space()
		if p.i >= len(p.in) || p.in[p.i] != ':' {
			return false
		}
		p.i++
		p.space()
		from := len(p.out)
		p.out = append(append(append(p.out, '"'), key...), '"', ':')
		if !p.value(depth + 1) {
			return false
		}
		if n := len(members); n > 0 && bytes.Compare(members[n-1].key, key) >= 0 {
			sorted = false
		}
		members = append(members, plainMember{key, from, len(p.out)})
		c, ok := p.next()
		if !ok {
			return false
		}
		if c == '}' {
			break
		}
		if c != ',' {
			return false
		}
		p.out = append(p.out, ',')
		p.space()
	}
	if !sorted {
		slices.SortFunc(members, func(a, b plainMember) int { return bytes.Compare(a.key, b.key) })
		for k := 1; k < len(members); k++ {
			if bytes.Equal(members[k-1].key, members[k].key) {
				return false // a repeated key: canonicalDecoded says where
			}
		}
		written := slices.Clone(p.out[start:])
		p.out = p.out[:start]
		for k, m := range members {
			if k > 0 {
				p.out = append(p.out, ',')
			}
			p.out = append(p.out, written[m.from-start:m.to-start]...)
		}
	}
	p.out = append(p.out, '}')
	return true
}

func writeString(b *bytes.Buffer, s string) {
	if plainString(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.WriteString(strings.TrimSuffix(sb.String(), "\n"))
}

// ArgsHash is the hex sha256 that binds a decision to one exact call: the
// canonical JSON of {"agent":agent,"arguments":args,"tool":tool}. Arguments
// that have no canonical form (invalid JSON, a repeated key) are hashed as
// their raw bytes under a distinct marker, so the hash still names exactly
// those bytes and never equals the hash of any canonical arguments.
func ArgsHash(agent, tool string, args json.RawMessage) string {
	h := sha256.New()
	canon, err := Canonical(args)
	if err != nil {
		// Not JSON-shaped: "!" cannot start a canonical document.
		fmt.Fprintf(h, "!raw:%d:%s:%d:%s:", len(agent), agent, len(tool), tool)
		h.Write(args)
		return hex.EncodeToString(h.Sum(nil))
	}
	var b bytes.Buffer
	b.WriteString(`{"agent":`)
	writeString(&b, agent)
	b.WriteString(`,"arguments":`)
	b.Write(canon)
	b.WriteString(`,"tool":`)
	writeString(&b, tool)
	b.WriteByte('}')
	h.Write(b.Bytes())
	return hex.EncodeToString(h.Sum(nil))
}
