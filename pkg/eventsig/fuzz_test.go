package eventsig

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/pkg/trust"
)

// FuzzVectors feeds the verifier messages grown from the golden vectors:
// whatever the headers and payload, Result never panics, a refusal wraps
// ErrForged with a reason of its own (never the catch-all "refused"), and
// what it accepts names the call and agent waited for.
func FuzzVectors(f *testing.F) {
	b, err := os.ReadFile(vectorsFile)
	if err != nil {
		f.Fatal(err)
	}
	var vs Vectors
	if err := json.Unmarshal(b, &vs); err != nil {
		f.Fatal(err)
	}
	for _, v := range vs.Vectors {
		data, _ := base64.StdEncoding.DecodeString(v.Data)
		var hs []string
		for k, val := range v.Headers {
			hs = append(hs, k+": "+val)
		}
		f.Add(strings.Join(hs, "\n"), data)
	}
	tv, err := trust.NewVerifier(vs.TrustedAccounts, nil)
	if err != nil {
		f.Fatal(err)
	}
	verifier := New(tv)
	f.Fuzz(func(t *testing.T, headers string, data []byte) {
		h := nats.Header{}
		for _, l := range strings.Split(headers, "\n") {
			if k, v, ok := strings.Cut(l, ": "); ok {
				h.Add(k, v)
			}
		}
		r, err := verifier.Result(h, data, "ann", "c1", "")
		if err != nil {
			if r != nil || !errors.Is(err, ErrForged) || Reason(err) == "refused" {
				t.Fatalf("Result = %+v, %v (reason %q)", r, err, Reason(err))
			}
			return
		}
		if r.CallID != "c1" || r.Agent != "ann" {
			t.Fatalf("accepted the result of %s/%s for ann/c1", r.Agent, r.CallID)
		}
	})
}
