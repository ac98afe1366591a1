package eventsig

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
)

// The cost per call of signing and verifying, beside the same work
// unsigned: a result of a 1 KiB output, in binary mode, as a worker
// encodes it and a client reads it.

func benchResult() events.ResultData {
	return events.ResultData{CallID: "c1", Agent: "ann", Tool: "read", Status: events.StatusOK, Output: strings.Repeat("x", 1024)}
}

func benchEncode(b *testing.B, s trust.Signer) {
	a := events.Attrs{ID: "ann.c1:result", Source: "toolgate://worker/w1", Type: events.TypeCallCompleted, Subject: "c1", Sign: Sign(s)}
	r := benchResult()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.EncodeData("toolgate.result.ann.c1", a, r, events.Binary); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeUnsigned is the baseline: a result encoded unsigned.
func BenchmarkEncodeUnsigned(b *testing.B) { benchEncode(b, trust.Signer{}) }

// BenchmarkEncodeSigned is a result encoded and signed (ed25519).
func BenchmarkEncodeSigned(b *testing.B) { benchEncode(b, newFixture(b).worker) }

// BenchmarkDecodeUnverified is the baseline: a result decoded, as the
// client read it before results were signed.
func BenchmarkDecodeUnverified(b *testing.B) {
	m := result(b, newFixture(b).worker, "ann", "c1", events.Binary, nil)
	b.ReportAllocs()
	for b.Loop() {
		var r events.ResultData
		if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyResult is a result decoded and verified: the signature
// and the call's identity, the signer's JWT checked once and kept.
func BenchmarkVerifyResult(b *testing.B) {
	f := newFixture(b)
	m := result(b, f.worker, "ann", "c1", events.Binary, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.v.Result(m.Header, m.Data, "ann", "c1", ""); err != nil {
			b.Fatal(err)
		}
	}
}

// The cost of signing a call's result and its audit event: two
// signatures, or one over both (the co-signed form), and of verifying
// an event of each form.

func benchInputs(b *testing.B) [][]byte {
	evs := batchEvents(b, 2)
	return [][]byte{events.EventSigningInput(evs[0]), events.EventSigningInput(evs[1])}
}

// BenchmarkSign2Alone signs two events, each with a signature of its own.
func BenchmarkSign2Alone(b *testing.B) {
	sign := Sign(newFixture(b).worker)
	inputs := benchInputs(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, in := range inputs {
			if _, _, err := sign(in); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSign2Together signs the same two events with one signature.
func BenchmarkSign2Together(b *testing.B) {
	sign := SignTogether(newFixture(b).worker)
	inputs := benchInputs(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sign(inputs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyCosigned verifies one event of a co-signed pair.
func BenchmarkVerifyCosigned(b *testing.B) {
	f := newFixture(b)
	evs := batchEvents(b, 2)
	signTogether(b, f.worker, evs)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.v.Verify(evs[1]); err != nil {
			b.Fatal(err)
		}
	}
}
