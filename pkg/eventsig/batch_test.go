package eventsig

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
)

// batchEvents are n events of one call as a worker signs them together:
// its result, then audit events.
func batchEvents(t testing.TB, n int) []event.Event {
	t.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		var err error
		if i == 0 {
			evs[i], err = events.New("ann.c1:result", "toolgate://worker/w1", events.TypeCallCompleted,
				events.ResultData{CallID: "c1", Agent: "ann", Tool: "read", Status: events.StatusOK, Output: "real"})
			evs[i].SetSubject("c1")
		} else {
			evs[i], err = events.New(fmt.Sprintf("ann.c1:audit:%d", i), "toolgate://worker/w1", events.TypeCallAudited,
				events.AuditData{Kind: events.AuditExecution, CallID: "c1", Agent: "ann", Tool: "read", Seq: uint64(i)})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return evs
}

// signTogether signs evs with one signature of s and sets their
// signature attributes.
func signTogether(t testing.TB, s trust.Signer, evs []event.Event) {
	t.Helper()
	inputs := make([][]byte, len(evs))
	for i, ev := range evs {
		inputs[i] = events.EventSigningInput(ev)
	}
	sigs, signer, err := SignTogether(s)(inputs)
	if err != nil || len(sigs) != len(evs) {
		t.Fatalf("SignTogether: %d signatures, %v", len(sigs), err)
	}
	for i := range evs {
		evs[i].SetExtension(events.ExtSignature, sigs[i])
		evs[i].SetExtension(events.ExtSigner, signer)
	}
}

func publicKey(t testing.TB, s trust.Signer) ed25519.PublicKey {
	t.Helper()
	priv, err := privateKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return priv.Public().(ed25519.PublicKey)
}

// TestSignTogether: every event of a batch of every size from 1 to 17
// verifies on its own through the Verifier; one event gets the single
// form, the very signature Sign makes.
func TestSignTogether(t *testing.T) {
	f := newFixture(t)
	for n := 1; n <= 17; n++ {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			evs := batchEvents(t, n)
			signTogether(t, f.worker, evs)
			for i, ev := range evs {
				sig, _ := events.Signature(ev)
				if got := strings.Count(sig, "."); (n == 1 && got != 0) || (n > 1 && got != 4) {
					t.Fatalf("event %d of %d: %q", i, n, sig)
				}
				if n > 1 && !strings.Contains(sig, "."+strconv.Itoa(i)+"."+strconv.Itoa(n)+".") {
					t.Fatalf("event %d of %d: %q", i, n, sig)
				}
				if _, err := f.v.Verify(ev); err != nil {
					t.Fatalf("event %d of %d: %v", i, n, err)
				}
			}
			if n == 1 {
				single, _, _ := Sign(f.worker)(events.EventSigningInput(evs[0]))
				if sig, _ := events.Signature(evs[0]); sig != single {
					t.Fatalf("one event: %q, Sign gives %q", sig, single)
				}
			}
		})
	}
}

// TestSaltFresh: the same events signed together twice get other salts,
// so a path's hashes say nothing of the other events.
func TestSaltFresh(t *testing.T) {
	f := newFixture(t)
	inputs := [][]byte{[]byte("a"), []byte("b")}
	one, _, _ := SignTogether(f.worker)(inputs)
	two, _, _ := SignTogether(f.worker)(inputs)
	for i := range one {
		a, _ := parseCosigned(one[i])
		b, _ := parseCosigned(two[i])
		if bytes.Equal(a.salt, b.salt) || bytes.Equal(a.path, b.path) {
			t.Fatalf("event %d: the same salt or path twice", i)
		}
	}
	if a, _ := parseCosigned(one[0]); bytes.Equal(a.salt, must(parseCosigned(one[1])).salt) {
		t.Fatal("two events of a batch share a salt")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestMerkleShape holds the tree to RFC 6962's: for 3 and 5 leaves the
// root is the hash the RFC's recursion names, and each path the
// siblings it names.
func TestMerkleShape(t *testing.T) {
	leaf := func(i int) [32]byte { return leafHash(make([]byte, SaltSize), []byte{byte(i)}) }
	n := func(l, r [32]byte) [32]byte { return nodeHash(l[:], r[:]) }
	cat := func(hs ...[32]byte) []byte {
		var b []byte
		for _, h := range hs {
			b = append(b, h[:]...)
		}
		return b
	}
	l := [5][32]byte{leaf(0), leaf(1), leaf(2), leaf(3), leaf(4)}
	tests := []struct {
		size  int
		root  [32]byte
		paths [][]byte
	}{
		{3, n(n(l[0], l[1]), l[2]), [][]byte{cat(l[1], l[2]), cat(l[0], l[2]), cat(n(l[0], l[1]))}},
		{5, n(n(n(l[0], l[1]), n(l[2], l[3])), l[4]), [][]byte{
			cat(l[1], n(l[2], l[3]), l[4]), cat(l[0], n(l[2], l[3]), l[4]),
			cat(l[3], n(l[0], l[1]), l[4]), cat(l[2], n(l[0], l[1]), l[4]),
			cat(n(n(l[0], l[1]), n(l[2], l[3]))),
		}},
	}
	for _, tt := range tests {
		paths := make([][]byte, tt.size)
		if root := merkle(l[:tt.size], paths); root != tt.root {
			t.Fatalf("size %d: root %x, want %x", tt.size, root, tt.root)
		}
		for i := range paths {
			if !bytes.Equal(paths[i], tt.paths[i]) {
				t.Fatalf("size %d, leaf %d: path %x, want %x", tt.size, i, paths[i], tt.paths[i])
			}
		}
	}
}

// cosignedParts splits a co-signed toolgatesig into its five parts.
func cosignedParts(sig string) []string { return strings.Split(sig, ".") }

// reencode changes the decoded bytes of a part.
func reencode(part string, change func([]byte) []byte) string {
	b, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(change(append([]byte(nil), b...)))
}

// nonCanonical spells part's bytes otherwise: the last character's
// unused low bit set (a lenient decoder reads the same bytes).
func nonCanonical(part string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, part[len(part)-1])
	return part[:len(part)-1] + string(alphabet[last^1])
}

// TestCosignedRefusals: a change to any part of a co-signed signature,
// or to the event under it, is refused as a bad signature.
func TestCosignedRefusals(t *testing.T) {
	f := newFixture(t)
	evs := batchEvents(t, 5)
	signTogether(t, f.worker, evs)
	ev := evs[1] // index 1 of 5: a path of 3 hashes
	good, _ := events.Signature(ev)
	if _, err := f.v.Verify(ev); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) func([]byte) []byte {
		return func(b []byte) []byte { b[i%len(b)] ^= 1; return b }
	}
	with := func(i int, v string) string {
		p := cosignedParts(good)
		p[i] = v
		return strings.Join(p, ".")
	}
	p := cosignedParts(good)
	other, _ := events.Signature(evs[2])
	single, _, _ := Sign(f.worker)(events.EventSigningInput(ev))
	tests := []struct{ name, sig string }{
		{"signature changed", with(0, reencode(p[0], flip(0)))},
		{"signature of the single form", with(0, single)},
		{"index changed", with(1, "0")},
		{"index changed to another of the same path length", with(1, "3")},
		{"index negative", with(1, "-1")},
		{"index with a sign", with(1, "+1")},
		{"index with a leading zero", with(1, "01")},
		{"index == size", with(1, "5")},
		{"index > size", with(1, "9")},
		{"index empty", with(1, "")},
		{"index not decimal", with(1, "0x1")},
		{"index with spaces", with(1, " 1")},
		{"index huge", with(1, "99999999999999999999")},
		{"size changed", with(2, "2")},
		{"size changed, the same path length", with(2, "3")},
		{"size smaller", with(2, "4")},
		{"size 1", with(2, "1")},
		{"size 0", with(2, "0")},
		{"size with a leading zero", with(2, "05")},
		{"size over the limit", with(2, "65537")},
		{"salt changed", with(3, reencode(p[3], flip(5)))},
		{"salt short", with(3, reencode(p[3], func(b []byte) []byte { return b[:15] }))},
		{"salt long", with(3, reencode(p[3], func(b []byte) []byte { return append(b, 0) }))},
		{"salt not canonical", with(3, nonCanonical(p[3]))},
		{"salt padded", with(3, p[3]+"==")},
		{"salt with a line break", with(3, p[3][:10]+"\n"+p[3][10:])},
		{"salt with a standard base64 character", with(3, p[3][:21]+"+")},
		{"first path hash changed", with(4, reencode(p[4], flip(0)))},
		{"second path hash changed", with(4, reencode(p[4], flip(32)))},
		{"last path hash changed", with(4, reencode(p[4], flip(95)))},
		{"path one hash short", with(4, reencode(p[4], func(b []byte) []byte { return b[:64] }))},
		{"path one hash long", with(4, reencode(p[4], func(b []byte) []byte { return append(b, b[:32]...) }))},
		{"path not whole hashes", with(4, reencode(p[4], func(b []byte) []byte { return b[:95] }))},
		{"path empty", with(4, "")},
		{"path not canonical", with(4, nonCanonical(p[4]))},
		{"signature not canonical", with(0, nonCanonical(p[0]))},
		{"another event's signature", other},
		{"four parts", strings.Join(p[:4], ".")},
		{"six parts", good + ".x"},
		{"a trailing dot", good + "."},
		{"empty parts", "...."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.sig == good {
				t.Fatal("the change changed nothing")
			}
			e := ev.Clone()
			e.SetExtension(events.ExtSignature, tt.sig)
			if _, err := f.v.Verify(e); !errors.Is(err, trust.ErrBadSignature) || Reason(err) != "bad-signature" {
				t.Fatalf("Verify(%q) = %v", tt.sig, err)
			}
		})
	}
	// The size is signed, and with it the index: another pair that
	// steers the path's computation the same way (here size 6, whose
	// tree has leaf 1 under the same siblings) gives the same root but
	// not the signed message, so an event has one co-signed toolgatesig.
	t.Run("size that steers the path the same", func(t *testing.T) {
		e := ev.Clone()
		e.SetExtension(events.ExtSignature, with(2, "6"))
		if _, err := f.v.Verify(e); !errors.Is(err, trust.ErrBadSignature) {
			t.Fatalf("Verify = %v", err)
		}
	})
	t.Run("data changed under a valid proof", func(t *testing.T) {
		e := ev.Clone()
		e.DataEncoded = bytes.Replace(e.DataEncoded, []byte(`"read"`), []byte(`"bash"`), 1)
		if _, err := f.v.Verify(e); !errors.Is(err, trust.ErrBadSignature) {
			t.Fatalf("Verify = %v", err)
		}
	})
	t.Run("id changed under a valid proof", func(t *testing.T) {
		e := ev.Clone()
		e.SetID("ann.c1:audit:9")
		if _, err := f.v.Verify(e); !errors.Is(err, trust.ErrBadSignature) {
			t.Fatalf("Verify = %v", err)
		}
	})
	t.Run("signed by another key", func(t *testing.T) {
		e := ev.Clone()
		e.SetExtension(events.ExtSigner, newFixture(t).worker.JWT) // another account: refused before the signature
		if _, err := f.v.Verify(e); err == nil {
			t.Fatal("accepted")
		}
		e = ev.Clone()
		e.SetExtension(events.ExtSigner, f.agent.JWT)
		if _, err := f.v.Verify(e); err == nil {
			t.Fatal("accepted")
		}
	})
}

// FuzzCosigned: whatever a co-signed toolgatesig says, its verification
// never panics, and what it accepts is a real proof: the root signed,
// from the very salt of an event of the batch.
func FuzzCosigned(f *testing.F) {
	fx := newFixture(f)
	key := publicKey(f, fx.worker)
	inputs := [][]byte{[]byte("result"), []byte("audit"), []byte("decision"), []byte("other"), []byte("fifth")}
	sigs, _, err := SignTogether(fx.worker)(inputs)
	if err != nil {
		f.Fatal(err)
	}
	for i, s := range sigs {
		f.Add(s, uint8(i))
		p := cosignedParts(s)
		f.Add(strings.Join([]string{p[0], "0" + p[1], p[2], p[3], p[4]}, "."), uint8(i))
		f.Add(strings.Join([]string{p[0], p[1], "1", p[3], ""}, "."), uint8(i))
	}
	roots := map[[32]byte]bool{}
	salts := map[string]int{}
	for i, s := range sigs {
		c := must(parseCosigned(s))
		roots[must(c.root(inputs[i]))] = true
		salts[string(c.salt)] = i
	}
	f.Fuzz(func(t *testing.T, sig string, which uint8) {
		in := []byte("not signed")
		if int(which) < len(inputs) {
			in = inputs[which]
		}
		if verifySignature(key, in, sig) != nil {
			return
		}
		if !strings.Contains(sig, ".") {
			t.Fatalf("accepted a single form signature of %q nobody made", in)
		}
		c, err := parseCosigned(sig)
		if err != nil {
			t.Fatalf("accepted %q that does not parse: %v", sig, err)
		}
		i, ok := salts[string(c.salt)]
		if !ok || i != int(which) || !roots[must(c.root(in))] {
			t.Fatalf("accepted %q for input %d: not a proof the batch holds", sig, which)
		}
	})
}

// TestSingleFormIsCanonical: a single form signature is read as the
// clients read it, canonical base64url only; the same signature with a
// line break, padding or stray bits in its last character is refused.
func TestSingleFormIsCanonical(t *testing.T) {
	f := newFixture(t)
	ev := batchEvents(t, 1)[0]
	signTogether(t, f.worker, []event.Event{ev})
	good, _ := events.Signature(ev)
	if strings.Contains(good, ".") {
		t.Fatalf("one event signed alone got the co-signed form %q", good)
	}
	if _, err := f.v.Verify(ev); err != nil {
		t.Fatalf("Verify = %v", err)
	}
	for name, sig := range map[string]string{
		"line break": good[:40] + "\n" + good[40:],
		"cr lf":      good[:40] + "\r\n" + good[40:],
		"padding":    good + "==",
		"stray bits": nonCanonical(good),
	} {
		t.Run(name, func(t *testing.T) {
			e := ev.Clone()
			e.SetExtension(events.ExtSignature, sig)
			if _, err := f.v.Verify(e); !errors.Is(err, trust.ErrBadSignature) {
				t.Fatalf("Verify(%q) = %v", sig, err)
			}
		})
	}
}
