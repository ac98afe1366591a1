package eventsig

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

const vectorsFile = "testdata/vectors.json"

// Vectors is the file every client's tests read: the accounts a reader
// trusts and the messages it must accept or refuse.
type Vectors struct {
	// Format names the signature format (the signing input's domain).
	Format string `json:"format"`
	// TrustedAccounts are the account public keys the reader trusts.
	TrustedAccounts []string `json:"trusted_accounts"`
	Vectors         []Vector `json:"vectors"`
}

// Vector is one result message as a reader receives it, and what the
// reader must make of it.
type Vector struct {
	Name string `json:"name"`
	// Mode is the CloudEvents content mode.
	Mode string `json:"mode"`
	// Subject is the NATS subject the message arrived on.
	Subject string `json:"subject"`
	// Headers are the NATS headers (none in structured-bare mode).
	Headers map[string]string `json:"headers"`
	// Data is the payload, standard base64.
	Data string `json:"data"`
	// Agent and CallID are who waits and for which call.
	Agent  string `json:"agent"`
	CallID string `json:"call_id"`
	// Valid says whether the reader accepts the message.
	Valid bool `json:"valid"`
	// Reason is Reason's name for the refusal; empty when valid.
	Reason string `json:"reason,omitempty"`
	// SigningInput is what the signature covers, for a valid message.
	SigningInput string `json:"signing_input,omitempty"`
	// Result is the result data a valid message carries.
	Result *events.ResultData `json:"result,omitempty"`
}

// vectorKey is a fixed key of the vectors: the same seed every run, so
// -update rewrites the same file.
func vectorKey(t testing.TB, prefix nkeys.PrefixByte, name string) nkeys.KeyPair {
	t.Helper()
	seed := sha256.Sum256([]byte("toolgate signature vectors: " + name))
	kp, err := nkeys.FromRawSeed(prefix, seed[:])
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// issuedAt is the fixed issue time of the vectors' JWTs.
var issuedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

// vectorUser issues a user JWT as the jwt library does (Encode), with a
// fixed issue time so that the JWT is the same every run.
func vectorUser(t testing.TB, account nkeys.KeyPair, name string, expires int64, tags ...string) trust.Signer {
	t.Helper()
	ukp := vectorKey(t, nkeys.PrefixByteUser, name+"@"+pub(t, account))
	uc := jwt.NewUserClaims(pub(t, ukp))
	uc.Name = name
	uc.Tags.Add(tags...)
	uc.Expires = expires
	uc.Issuer = pub(t, account)
	uc.IssuedAt = issuedAt
	uc.Type = jwt.UserClaim
	uc.Version = 2
	cd, err := json.Marshal(&uc.ClaimsData)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512_256(cd)
	uc.ID = base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])
	head, _ := json.Marshal(jwt.Header{Type: jwt.TokenTypeJwt, Algorithm: jwt.AlgorithmNkey})
	body, err := json.Marshal(uc)
	if err != nil {
		t.Fatal(err)
	}
	toSign := base64.RawURLEncoding.EncodeToString(head) + "." + base64.RawURLEncoding.EncodeToString(body)
	sig, err := account.Sign([]byte(toSign))
	if err != nil {
		t.Fatal(err)
	}
	tok := toSign + "." + base64.RawURLEncoding.EncodeToString(sig)
	if _, err := jwt.DecodeUserClaims(tok); err != nil {
		t.Fatalf("vector JWT of %s: %v", name, err)
	}
	return trust.Signer{Key: ukp, JWT: tok}
}

func pub(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// vectorTime is the fixed time attribute of the vectors' events.
var vectorTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// vectorMsg encodes the result of call id of agent in mode as a worker
// does, signed by sign (unsigned when nil), after change.
func vectorMsg(t testing.TB, sign events.SignFunc, agent, id string, mode events.Mode, change func(*events.Attrs, *events.ResultData)) (*nats.Msg, []byte) {
	t.Helper()
	a := events.Attrs{ID: agent + "." + id + ":result", Source: "toolgate://worker/w1", Type: events.TypeCallCompleted, Subject: id}
	r := events.ResultData{CallID: id, Agent: agent, Tool: "read", Status: events.StatusOK, Output: "hello, world\n",
		Decision: &events.Decision{Action: "allow", Rule: "read-workspace"}, DurationMS: 3}
	if change != nil {
		change(&a, &r)
	}
	ev, err := events.New(a.ID, a.Source, a.Type, r)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetTime(vectorTime)
	ev.SetSubject(a.Subject)
	input := events.EventSigningInput(ev)
	if sign != nil {
		sig, signer, err := sign(input)
		if err != nil {
			t.Fatal(err)
		}
		ev.SetExtension(events.ExtSignature, sig)
		ev.SetExtension(events.ExtSigner, signer)
	}
	m, err := events.Encode(events.ResultSubject(agent, id), ev, mode)
	if err != nil {
		t.Fatal(err)
	}
	if mode != events.Binary { // members in a fixed order
		var members map[string]json.RawMessage
		if err := json.Unmarshal(m.Data, &members); err != nil {
			t.Fatal(err)
		}
		if m.Data, err = json.Marshal(members); err != nil {
			t.Fatal(err)
		}
	}
	return m, input
}

// vectorCosign signs a result's signing input in the co-signed form, as
// event index of a batch of size (size 1 only to be refused): with its
// call's execution audit event at index 1, other calls' results at the
// others, every salt derived from the vector's place so that the vectors
// come out the same every run.
func vectorCosign(t testing.TB, s trust.Signer, index, size int) events.SignFunc {
	priv, err := privateKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return func(input []byte) (string, string, error) {
		inputs := make([][]byte, size)
		salts := make([]byte, SaltSize*size)
		for i := range inputs {
			id := "c" + strconv.Itoa(i+1)
			switch i {
			case index:
				inputs[i] = input
			case 1:
				inputs[i] = events.SigningInput(events.TypeCallAudited, "toolgate://worker/w1", "ann.c1:audit", "",
					[]byte(`{"kind":"execution","call_id":"c1","agent":"ann","tool":"read","status":"ok","worker":"w1"}`))
			default:
				inputs[i] = events.SigningInput(events.TypeCallCompleted, "toolgate://worker/w1", "ann."+id+":result", id,
					[]byte(`{"call_id":"`+id+`","agent":"ann","tool":"read","status":"ok","output":"hello"}`))
			}
			sum := sha256.Sum256(fmt.Appendf(nil, "toolgate signature vectors: salt %d of %d at %d", i, size, index))
			copy(salts[i*SaltSize:], sum[:SaltSize])
		}
		return cosign(priv, inputs, salts)[index], s.JWT, nil
	}
}

// sigPart changes part i of a co-signed ce-toolgatesig.
func sigPart(i int, change func(string) string) func(*nats.Msg, []byte) (*nats.Msg, []byte) {
	return func(m *nats.Msg, in []byte) (*nats.Msg, []byte) {
		parts := strings.Split(m.Header.Get("ce-toolgatesig"), ".")
		parts[i] = change(parts[i])
		m.Header.Set("ce-toolgatesig", strings.Join(parts, "."))
		return m, in
	}
}

// makeVectors builds the vectors from fixed keys.
func makeVectors(t testing.TB) Vectors {
	acct := vectorKey(t, nkeys.PrefixByteAccount, "toolgate account")
	agents := vectorKey(t, nkeys.PrefixByteAccount, "agents account")
	alien := vectorKey(t, nkeys.PrefixByteAccount, "another install's account")
	worker := vectorUser(t, acct, "w1", 0, trust.RoleTag(trust.RoleWorker))
	approver := vectorUser(t, acct, "approver", 0, trust.RoleTag(trust.RoleApprover))
	agent := vectorUser(t, agents, "ann", 0, trust.RoleTag(trust.RoleAgent), "toolgate-services:"+pub(t, acct))
	alienWorker := vectorUser(t, alien, "w1", 0, trust.RoleTag(trust.RoleWorker))
	expired := vectorUser(t, acct, "w-old", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), trust.RoleTag(trust.RoleWorker))

	twoRoles := vectorUser(t, acct, "w2", 0, trust.RoleTag(trust.RoleWorker), trust.RoleTag(trust.RoleAdmin))
	nameless := vectorUser(t, acct, " ", 0, trust.RoleTag(trust.RoleWorker))
	header := func(k, v string) func(*nats.Msg, []byte) (*nats.Msg, []byte) {
		return func(m *nats.Msg, _ []byte) (*nats.Msg, []byte) {
			if v == "" {
				m.Header.Del(k)
			} else {
				m.Header.Set(k, v)
			}
			return m, nil
		}
	}
	// A JWT whose signature is not its issuer's: one byte of it changed.
	j := []byte(worker.JWT)
	j[len(j)-20] ^= 'A' ^ 'B'
	if j[len(j)-20] == worker.JWT[len(j)-20] {
		t.Fatal("JWT unchanged")
	}
	badJWT := string(j)
	otherSig, _ := vectorMsg(t, Sign(worker), "ann", "c9", events.Binary, nil)
	tamper := func(m *nats.Msg, in []byte) (*nats.Msg, []byte) {
		m.Data = bytes.Replace(m.Data, []byte("hello, world"), []byte("rm -rf ~ now"), 1)
		return m, nil
	}
	replay := func(callID string) func(*nats.Msg, []byte) (*nats.Msg, []byte) {
		return func(m *nats.Msg, in []byte) (*nats.Msg, []byte) {
			m.Subject = events.ResultSubject("ann", callID)
			return m, nil
		}
	}
	cosign := func(index, size int) events.SignFunc { return vectorCosign(t, worker, index, size) }
	type spec struct {
		name   string
		s      trust.Signer
		agent  string
		mode   events.Mode
		change func(*events.Attrs, *events.ResultData)
		after  func(*nats.Msg, []byte) (*nats.Msg, []byte)
		sign   events.SignFunc // instead of s's own

		callID string // waited for; default c1
		reason string
	}
	specs := []spec{
		{name: "result, binary mode", s: worker, mode: events.Binary},
		{name: "result, structured mode", s: worker, mode: events.Structured},
		{name: "result, structured mode without headers", s: worker, mode: events.StructuredBare},
		{name: "result, binary mode, attributes percent-encoded", s: worker, mode: events.Binary,
			change: func(a *events.Attrs, _ *events.ResultData) { a.Source = "toolgate://worker/host name é" }},
		{name: "denied result", s: worker, mode: events.Binary, change: func(_ *events.Attrs, r *events.ResultData) {
			r.Tool, r.Status, r.Output, r.IsError = "bash", events.StatusDenied, "", true
			r.Decision = &events.Decision{Action: "deny", Rule: "no-rm", Reason: "rm is not allowed"}
		}},
		{name: "tampered result, binary mode", s: worker, mode: events.Binary, after: tamper, reason: "bad-signature"},
		{name: "tampered result, structured mode", s: worker, mode: events.Structured, after: tamper, reason: "bad-signature"},
		{name: "unsigned result", mode: events.Binary, reason: "unsigned"},
		{name: "result signed by an agent", s: agent, mode: events.Binary, reason: "foreign-issuer"},
		{name: "result signed by an approver of the trusted account", s: approver, mode: events.Binary, reason: "wrong-role"},
		{name: "result signed by another install's worker", s: alienWorker, mode: events.Binary, reason: "foreign-issuer"},
		{name: "result signed by a worker whose JWT expired", s: expired, mode: events.Binary, reason: "expired"},
		{name: "result replayed onto another call id", s: worker, mode: events.Binary, after: replay("c2"), callID: "c2", reason: "wrong-call"},
		{name: "result replayed onto another call id, structured mode", s: worker, mode: events.Structured, after: replay("c2"), callID: "c2", reason: "wrong-call"},
		{name: "another agent's result", s: worker, agent: "bob", mode: events.Binary, reason: "wrong-call"},
		{name: "agent in the data differs", s: worker, mode: events.Binary,
			change: func(_ *events.Attrs, r *events.ResultData) { r.Agent = "bob" }, reason: "wrong-agent"},
		{name: "not a result", s: worker, mode: events.Binary,
			change: func(a *events.Attrs, _ *events.ResultData) { a.Type = events.TypeCallRequested }, reason: "wrong-type"},
		{name: "signer is not a JWT", s: worker, mode: events.Binary, after: header("ce-toolgatesigner", "not-a-jwt"), reason: "bad-jwt"},
		{name: "signer JWT not signed by its issuer", s: worker, mode: events.Binary, after: header("ce-toolgatesigner", badJWT), reason: "bad-jwt"},
		{name: "signer JWT names two roles", s: twoRoles, mode: events.Binary, reason: "wrong-role"},
		{name: "signer JWT names no identity", s: nameless, mode: events.Binary, reason: "bad-jwt"},
		{name: "signature not base64url", s: worker, mode: events.Binary, after: header("ce-toolgatesig", "!!not base64!!"), reason: "bad-signature"},
		{name: "signature with stray bits in its last character", s: worker, mode: events.Binary, after: func(m *nats.Msg, in []byte) (*nats.Msg, []byte) {
			m.Header.Set("ce-toolgatesig", nonCanonical(m.Header.Get("ce-toolgatesig")))
			return m, in
		}, reason: "bad-signature"},
		{name: "signature of another event", s: worker, mode: events.Binary,
			after: header("ce-toolgatesig", otherSig.Header.Get("ce-toolgatesig")), reason: "bad-signature"},
		{name: "signature without its signer", s: worker, mode: events.Binary, after: header("ce-toolgatesigner", ""), reason: "unsigned"},
		{name: "result data of the wrong shape", s: worker, mode: events.Binary, after: func(m *nats.Msg, _ []byte) (*nats.Msg, []byte) {
			m.Data = []byte(`{"call_id":"c1","agent":"ann","tool":"read","status":5,"output":"hello, world\n"}`)
			return m, nil
		}, reason: "malformed"},
		{name: "no event id", s: worker, mode: events.Binary, after: header("ce-id", ""), reason: "malformed"},
		{name: "another agent's result, structured mode without headers", s: worker, agent: "bob", mode: events.StructuredBare, reason: "wrong-call"},
		{name: "not from a worker", s: worker, mode: events.Binary,
			change: func(a *events.Attrs, _ *events.ResultData) { a.Source = "agent://ann" }, reason: "wrong-source"},

		// The co-signed form: the result signed with other events.
		{name: "co-signed result and audit event, binary mode", sign: cosign(0, 2), mode: events.Binary},
		{name: "co-signed result and audit event, structured mode", sign: cosign(0, 2), mode: events.Structured},
		{name: "co-signed result, index 2 of 3", sign: cosign(2, 3), mode: events.Binary},
		{name: "co-signed result, index 4 of 5", sign: cosign(4, 5), mode: events.Binary},
		{name: "co-signed result, path tampered", sign: cosign(2, 3), mode: events.Binary,
			after: sigPart(4, func(p string) string { return reencode(p, func(b []byte) []byte { b[7] ^= 1; return b }) }), reason: "bad-signature"},
		{name: "co-signed result, index changed", sign: cosign(0, 2), mode: events.Binary,
			after: sigPart(1, func(string) string { return "1" }), reason: "bad-signature"},
		{name: "co-signed result, size changed", sign: cosign(2, 3), mode: events.Binary,
			after: sigPart(2, func(string) string { return "4" }), reason: "bad-signature"},
		{name: "co-signed result, salt changed", sign: cosign(2, 3), mode: events.Binary,
			after: sigPart(3, func(p string) string { return reencode(p, func(b []byte) []byte { b[0] ^= 1; return b }) }), reason: "bad-signature"},
		{name: "co-signed result, path one hash short", sign: cosign(1, 5), mode: events.Binary,
			after: sigPart(4, func(p string) string { return reencode(p, func(b []byte) []byte { return b[:len(b)-32] }) }), reason: "bad-signature"},
		{name: "co-signed result, path one hash long", sign: cosign(4, 5), mode: events.Binary,
			after: sigPart(4, func(p string) string { return reencode(p, func(b []byte) []byte { return append(b, b[:32]...) }) }), reason: "bad-signature"},
		{name: "co-signed result, salt not canonical base64url", sign: cosign(2, 3), mode: events.Binary,
			after: sigPart(3, nonCanonical), reason: "bad-signature"},
		{name: "co-signed result, index with a leading zero", sign: cosign(2, 3), mode: events.Binary,
			after: sigPart(1, func(p string) string { return "0" + p }), reason: "bad-signature"},
		{name: "co-signed result, size 1", sign: cosign(0, 1), mode: events.Binary, reason: "bad-signature"},
		{name: "co-signed result, index equal to size", sign: cosign(0, 2), mode: events.Binary,
			after: sigPart(1, func(string) string { return "2" }), reason: "bad-signature"},
		{name: "co-signed result, a single form signature in it", sign: cosign(0, 2), mode: events.Binary,
			after: func(m *nats.Msg, in []byte) (*nats.Msg, []byte) {
				single, _, err := Sign(worker)(in)
				if err != nil {
					t.Fatal(err)
				}
				return sigPart(0, func(string) string { return single })(m, in)
			}, reason: "bad-signature"},
		{name: "co-signed result, data tampered under a valid proof", sign: cosign(2, 3), mode: events.Binary, after: tamper, reason: "bad-signature"},
	}
	out := Vectors{Format: "toolgate-event-signature-v1", TrustedAccounts: []string{pub(t, acct)}}
	for _, sp := range specs {
		if sp.agent == "" {
			sp.agent = "ann"
		}
		if sp.callID == "" {
			sp.callID = "c1"
		}
		sign := sp.sign
		if sign == nil {
			sign = Sign(sp.s)
		}
		m, input := vectorMsg(t, sign, sp.agent, "c1", sp.mode, sp.change)
		if sp.after != nil {
			m, input = sp.after(m, input)
		}
		v := Vector{Name: sp.name, Mode: sp.mode.String(), Subject: m.Subject, Headers: map[string]string{},
			Data: base64.StdEncoding.EncodeToString(m.Data), Agent: "ann", CallID: sp.callID, Valid: sp.reason == "", Reason: sp.reason}
		for k, vs := range m.Header {
			v.Headers[strings.ToLower(k)] = vs[0]
		}
		if v.Valid {
			v.SigningInput = string(input)
			var r events.ResultData
			if _, err := events.DecodeData(m.Header, m.Data, &r); err != nil {
				t.Fatal(err)
			}
			v.Result = &r
		}
		out.Vectors = append(out.Vectors, v)
	}
	return out
}

// TestVectorsGolden holds testdata/vectors.json to what makeVectors
// builds; -update rewrites it.
func TestVectorsGolden(t *testing.T) {
	b, err := json.MarshalIndent(makeVectors(t), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if again, _ := json.MarshalIndent(makeVectors(t), "", "  "); !bytes.Equal(b[:len(b)-1], again) {
		t.Fatal("two builds of the vectors differ")
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(vectorsFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/eventsig -run TestVectorsGolden -update)", err)
	}
	if !bytes.Equal(want, b) {
		t.Fatalf("%s is stale: run go test ./pkg/eventsig -run TestVectorsGolden -update", vectorsFile)
	}
}

// TestVectors checks that the Go verifier accepts and refuses the vectors
// as they say, from the file every client's tests read.
func TestVectors(t *testing.T) {
	b, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var vs Vectors
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	tv, err := trust.NewVerifier(vs.TrustedAccounts, nil)
	if err != nil {
		t.Fatal(err)
	}
	var valid, refused int
	for _, v := range vs.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			h := nats.Header{}
			for k, val := range v.Headers {
				h.Set(k, val)
			}
			data, err := base64.StdEncoding.DecodeString(v.Data)
			if err != nil {
				t.Fatal(err)
			}
			r, err := New(tv).Result(h, data, v.Agent, v.CallID, "")
			if got := Reason(err); got != v.Reason || (err == nil) != v.Valid {
				t.Fatalf("Result: %v (reason %q); want valid %v, reason %q", err, got, v.Valid, v.Reason)
			}
			if v.Valid {
				valid++
				if got, _ := json.Marshal(r); !bytes.Equal(got, mustJSON(t, v.Result)) {
					t.Fatalf("result %s, want %s", got, mustJSON(t, v.Result))
				}
				return
			}
			refused++
			if !errors.Is(err, ErrForged) {
				t.Fatalf("refusal %v does not wrap ErrForged", err)
			}
		})
	}
	if valid < 4 || refused < 10 || !slices.ContainsFunc(vs.Vectors, func(v Vector) bool { return v.Mode == "structured" && v.Valid }) {
		t.Fatalf("%d valid and %d refused vectors: the file lost some", valid, refused)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVectorsCatchLenientReaders: the refused co-signed vectors about
// strict parsing (a leading zero, a non-canonical salt, size 1, index
// equal to size) verify under a reader that parses leniently - so they
// test the strictness, not a broken signature.
func TestVectorsCatchLenientReaders(t *testing.T) {
	vs := makeVectors(t)
	key := publicKey(t, vectorUser(t, vectorKey(t, nkeys.PrefixByteAccount, "toolgate account"), "w1", 0, trust.RoleTag(trust.RoleWorker)))
	lenient := func(sig string, input []byte) bool {
		p := strings.Split(sig, ".")
		index, err1 := strconv.Atoi(p[1])
		size, err2 := strconv.Atoi(p[2])
		raw, err3 := base64.RawURLEncoding.DecodeString(p[0])
		salt, err4 := base64.RawURLEncoding.DecodeString(p[3])
		path, err5 := base64.RawURLEncoding.DecodeString(p[4])
		if err := errors.Join(err1, err2, err3, err4, err5); err != nil || index < 0 || size < 1 {
			return false
		}
		c := cosigned{sig: raw, index: uint32(index), size: uint32(size), salt: salt, path: path}
		root, err := c.root(input)
		return err == nil && ed25519.Verify(key, batchMessage(nil, uint32(size), root), raw)
	}
	for _, name := range []string{"co-signed result, salt not canonical base64url", "co-signed result, index with a leading zero",
		"co-signed result, size 1", "co-signed result, index equal to size", "co-signed result, index 2 of 3"} {
		i := slices.IndexFunc(vs.Vectors, func(v Vector) bool { return v.Name == name })
		if i < 0 {
			t.Fatalf("no vector %q", name)
		}
		v := vs.Vectors[i]
		h := nats.Header{}
		for k, val := range v.Headers {
			h.Set(k, val)
		}
		data, _ := base64.StdEncoding.DecodeString(v.Data)
		ev, _, err := events.Decode(h, data)
		if err != nil {
			t.Fatal(err)
		}
		sig, _ := events.Signature(ev)
		if !lenient(sig, events.EventSigningInput(ev)) {
			t.Errorf("%s: a lenient reader refuses it too", name)
		}
	}
}
