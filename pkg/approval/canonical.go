package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
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

func writeString(b *bytes.Buffer, s string) {
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
