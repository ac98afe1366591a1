package eventsig

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/trust"
)

// The co-signed form of toolgatesig (doc.go, "Co-signed events"): one
// ed25519 signature over the root of a Merkle tree (RFC 6962) of several
// events' salted signing inputs, and per event its place in the tree and
// its inclusion path (RFC 9162 §2.1.3.2).

// SignBatch signs the signing inputs of several events with one ed25519
// signature and returns each event's toolgatesig (in the order of
// inputs) and the signer's JWT for toolgatesigner. One input gets the
// single form, exactly what events.SignFunc gives; two or more the
// co-signed form, each with a fresh random salt.
type SignBatch func(inputs [][]byte) (sigs []string, signer string, err error)

// SignTogether returns the SignBatch of signer (a worker's key and JWT);
// nil when signer has no key or no JWT.
func SignTogether(s trust.Signer) SignBatch {
	if s.Key == nil || s.JWT == "" {
		return nil
	}
	priv, err := privateKey(s)
	if err != nil {
		return func([][]byte) ([]string, string, error) { return nil, "", err }
	}
	return func(inputs [][]byte) ([]string, string, error) {
		switch len(inputs) {
		case 0:
			return nil, s.JWT, nil
		case 1:
			return []string{base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, inputs[0]))}, s.JWT, nil
		}
		if len(inputs) > MaxBatch {
			return nil, "", fmt.Errorf("sign %d events together: at most %d", len(inputs), MaxBatch)
		}
		salts := make([]byte, SaltSize*len(inputs))
		if _, err := rand.Read(salts); err != nil {
			return nil, "", fmt.Errorf("salt: %w", err)
		}
		return cosign(priv, inputs, salts), s.JWT, nil
	}
}

// MaxBatch is the most events one co-signature covers (the form's size
// limit).
const MaxBatch = 1 << 16

// SaltSize is the length of a co-signed event's salt.
const SaltSize = 16

// batchDomain starts the message a co-signature signs; a single form
// message starts "27:toolgate-event-signature-v1\n", so the two are
// never the same bytes.
const batchDomain = "23:toolgate-event-batch-v1\n"

// privateKey derives the ed25519 key of s from its seed.
func privateKey(s trust.Signer) (ed25519.PrivateKey, error) {
	seed, err := s.Key.Seed()
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || len(raw) != ed25519.SeedSize {
		return nil, fmt.Errorf("signing key: not an ed25519 seed: %v", err)
	}
	return ed25519.NewKeyFromSeed(raw), nil
}

// cosign signs inputs (two or more) with the given salts (SaltSize
// bytes each, in order) as one batch and returns each one's co-signed
// toolgatesig. The values share one string (a batch is published
// together).
func cosign(priv ed25519.PrivateKey, inputs [][]byte, salts []byte) []string {
	n := len(inputs)
	leaves := make([][32]byte, n)
	for i, in := range inputs {
		leaves[i] = leafHash(salts[i*SaltSize:(i+1)*SaltSize], in)
	}
	// every path in one array, each with room for the deepest
	depth := bits.Len(uint(n - 1))
	hashes := make([]byte, n*depth*sha256.Size)
	paths := make([][]byte, n)
	for i := range paths {
		paths[i] = hashes[i*depth*sha256.Size : i*depth*sha256.Size : (i+1)*depth*sha256.Size]
	}
	root := merkle(leaves, paths)
	var msg [len(batchDomain) + 6 + 64]byte
	sig := ed25519.Sign(priv, batchMessage(msg[:0], uint32(n), root))
	enc := base64.RawURLEncoding
	size := 0
	for i := range paths {
		size += enc.EncodedLen(len(sig)) + 2*6 + 4 + enc.EncodedLen(SaltSize) + enc.EncodedLen(len(paths[i]))
	}
	b := make([]byte, 0, size)
	ends := make([]int, n)
	for i := range paths {
		b = enc.AppendEncode(b, sig)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, '.')
		b = enc.AppendEncode(b, salts[i*SaltSize:(i+1)*SaltSize])
		b = append(b, '.')
		b = enc.AppendEncode(b, paths[i])
		ends[i] = len(b)
	}
	all := string(b)
	out := make([]string, n)
	for i, start := 0, 0; i < n; i++ {
		out[i], start = all[start:ends[i]], ends[i]
	}
	return out
}

// leafHash is SHA-256(0x00 || salt || input).
func leafHash(salt, input []byte) [32]byte {
	var buf [512]byte // a signing input is about 200 bytes
	b := append(buf[:0], 0)
	b = append(b, salt...)
	return sha256.Sum256(append(b, input...))
}

// nodeHash is SHA-256(0x01 || left || right).
func nodeHash(left, right []byte) [32]byte {
	var b [1 + 64]byte
	b[0] = 1
	copy(b[1:], left)
	copy(b[33:], right)
	return sha256.Sum256(b[:])
}

// merkle returns the Merkle Tree Hash of leaves (RFC 6962 §2.1) and
// appends to paths[i] the inclusion path of leaf i, leaf to root.
func merkle(leaves [][32]byte, paths [][]byte) [32]byte {
	n := len(leaves)
	if n == 1 {
		return leaves[0]
	}
	k := 1 << (bits.Len(uint(n-1)) - 1) // the largest power of two < n
	l, r := merkle(leaves[:k], paths[:k]), merkle(leaves[k:], paths[k:])
	for i := range paths[:k] {
		paths[i] = append(paths[i], r[:]...)
	}
	for i := k; i < n; i++ {
		paths[i] = append(paths[i], l[:]...)
	}
	return nodeHash(l[:], r[:])
}

// batchMessage appends to b what a co-signature signs: the domain, the
// batch's size in decimal and a newline, then the hex of root. Signing
// the size binds it, and with it the index (for a given size every
// index walks the path differently), so an event has exactly one valid
// co-signed toolgatesig.
func batchMessage(b []byte, size uint32, root [32]byte) []byte {
	b = append(b, batchDomain...)
	b = strconv.AppendUint(b, uint64(size), 10)
	b = append(b, '\n')
	return hex.AppendEncode(b, root[:])
}

// errCosigned says which part of a co-signed toolgatesig is wrong; it is
// reported under trust.ErrBadSignature.
var errCosigned = errors.New("co-signed signature")

// cosigned is a parsed co-signed toolgatesig.
type cosigned struct {
	sig         []byte
	index, size uint32
	salt, path  []byte
}

// parseCosigned parses the five parts of a co-signed toolgatesig
// strictly: decimal index and size without sign or leading zero, 2 <=
// size <= MaxBatch, index < size, canonical base64url parts, a 64-byte
// signature, a 16-byte salt and a path of whole hashes.
func parseCosigned(v string) (cosigned, error) {
	var parts [5]string
	rest := v
	for i := range 4 {
		var ok bool
		if parts[i], rest, ok = strings.Cut(rest, "."); !ok {
			return cosigned{}, fmt.Errorf("%w: %d parts, not 5", errCosigned, i+1)
		}
	}
	parts[4] = rest
	if strings.Contains(rest, ".") {
		return cosigned{}, fmt.Errorf("%w: more than 5 parts", errCosigned)
	}
	var c cosigned
	var ok bool
	if c.sig, ok = strictBase64(parts[0]); !ok || len(c.sig) != ed25519.SignatureSize {
		return c, fmt.Errorf("%w: the signature is not %d bytes of canonical base64url", errCosigned, ed25519.SignatureSize)
	}
	if c.index, ok = decimal(parts[1]); !ok {
		return c, fmt.Errorf("%w: index %q is not a plain decimal", errCosigned, parts[1])
	}
	if c.size, ok = decimal(parts[2]); !ok || c.size < 2 || c.size > MaxBatch {
		return c, fmt.Errorf("%w: size %q is not a decimal from 2 to %d", errCosigned, parts[2], MaxBatch)
	}
	if c.index >= c.size {
		return c, fmt.Errorf("%w: index %d of size %d", errCosigned, c.index, c.size)
	}
	if c.salt, ok = strictBase64(parts[3]); !ok || len(c.salt) != SaltSize {
		return c, fmt.Errorf("%w: the salt is not %d bytes of canonical base64url", errCosigned, SaltSize)
	}
	if c.path, ok = strictBase64(parts[4]); !ok || len(c.path)%sha256.Size != 0 {
		return c, fmt.Errorf("%w: the path is not whole hashes in canonical base64url", errCosigned)
	}
	return c, nil
}

// root computes the tree's root from the event's signing input and the
// inclusion path (RFC 9162 §2.1.3.2); an error when the path is not
// exactly as long as (index, size) needs.
func (c cosigned) root(input []byte) ([32]byte, error) {
	fn, sn := c.index, c.size-1
	r := leafHash(c.salt, input)
	for p := c.path; len(p) > 0; p = p[sha256.Size:] {
		if sn == 0 {
			return r, fmt.Errorf("%w: the path is longer than index %d of size %d needs", errCosigned, c.index, c.size)
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p[:sha256.Size], r[:])
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn, sn = fn>>1, sn>>1
				}
			}
		} else {
			r = nodeHash(r[:], p[:sha256.Size])
		}
		fn, sn = fn>>1, sn>>1
	}
	if sn != 0 {
		return r, fmt.Errorf("%w: the path is shorter than index %d of size %d needs", errCosigned, c.index, c.size)
	}
	return r, nil
}

// verifySignature reports whether sig, a toolgatesig of either form,
// verifies input by key; the error says why not.
func verifySignature(key ed25519.PublicKey, input []byte, sig string) error {
	if !strings.Contains(sig, ".") {
		// Canonical base64url, as every client reads it: no line
		// breaks, no stray bits, no padding.
		raw, ok := strictBase64(sig)
		if !ok || !ed25519.Verify(key, input, raw) {
			return errors.New("the signature does not verify")
		}
		return nil
	}
	c, err := parseCosigned(sig)
	if err != nil {
		return err
	}
	root, err := c.root(input)
	if err != nil {
		return err
	}
	var msg [len(batchDomain) + 6 + 64]byte
	if !ed25519.Verify(key, batchMessage(msg[:0], c.size, root), c.sig) {
		return fmt.Errorf("%w: the signature does not verify the root", errCosigned)
	}
	return nil
}

// strictBase64 decodes canonical base64url without padding: no padding,
// no character outside the alphabet (line breaks included), no stray
// bits in the last character.
func strictBase64(s string) ([]byte, bool) {
	b, err := strict64.DecodeString(s)
	if err != nil || base64.RawURLEncoding.EncodedLen(len(b)) != len(s) {
		return nil, false
	}
	return b, true
}

// strict64 is base64url without padding refusing stray bits (made once:
// Strict copies the encoding).
var strict64 = base64.RawURLEncoding.Strict()

// decimal parses ASCII digits without sign or leading zero ("0" itself
// allowed), up to 6 of them.
func decimal(s string) (uint32, bool) {
	if s == "" || len(s) > 6 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n uint32
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + uint32(s[i]-'0')
	}
	return n, true
}
