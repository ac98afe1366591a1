package approval

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

func signed(t *testing.T, kp nkeys.KeyPair) *Decision {
	t.Helper()
	d := &Decision{
		CallID: "call-1", ArgsSHA256: ArgsHash("agent", "bash", []byte(`{"command":"make"}`)),
		Outcome: Approve, Approver: "alice", Comment: "fine",
		DecidedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)),
	}
	if err := d.Sign(kp); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSignVerify(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	other, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	otherPub, _ := other.PublicKey()
	trusted, err := NewKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutate  func(d *Decision)
		trusted func(string) bool
		want    error
	}{
		{"valid", func(*Decision) {}, trusted.Trusted, nil},
		{"valid after a JSON round trip", nil, trusted.Trusted, nil},
		{"nil trust fails closed", func(*Decision) {}, nil, ErrUntrustedKey},
		{"untrusted key", func(*Decision) {}, KeySet{otherPub: true}.Trusted, ErrUntrustedKey},
		{"other hash", func(d *Decision) { d.ArgsSHA256 = ArgsHash("agent", "bash", []byte(`{"command":"rm -rf /"}`)) }, trusted.Trusted, ErrBadSignature},
		{"other outcome", func(d *Decision) { d.Outcome = Reject }, trusted.Trusted, ErrBadSignature},
		{"other approver", func(d *Decision) { d.Approver = "mallory" }, trusted.Trusted, ErrBadSignature},
		{"amendment added", func(d *Decision) { d.AlwaysAllow = &Amendment{ID: "x", Agent: "agent", Tool: "bash"} }, trusted.Trusted, ErrBadSignature},
		{"key swapped", func(d *Decision) { d.PublicKey = otherPub }, KeySet{otherPub: true}.Trusted, ErrBadSignature},
		{"unsigned", func(d *Decision) { d.Signature = "" }, trusted.Trusted, ErrBadSignature},
		{"garbage signature", func(d *Decision) { d.Signature = "!!" }, trusted.Trusted, ErrBadSignature},
		{"not a user key", func(d *Decision) { d.PublicKey = "SUAFOO" }, trusted.Trusted, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := signed(t, kp)
			if tt.mutate == nil {
				raw, _ := jsonRoundTrip(d)
				d = raw
			} else {
				tt.mutate(d)
			}
			err := d.Verify(tt.trusted)
			if tt.want == nil && err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestNewKeySetRefusesNonUserKeys(t *testing.T) {
	seed, _ := nkeys.CreateUser()
	s, _ := seed.Seed()
	if _, err := NewKeySet(string(s)); err == nil {
		t.Fatal("a seed was accepted as a trusted public key")
	}
	acc, _ := nkeys.CreateAccount()
	ap, _ := acc.PublicKey()
	if _, err := NewKeySet(ap); err == nil {
		t.Fatal("an account key was accepted as a trusted approver key")
	}
}

func TestDecisionValidate(t *testing.T) {
	ok := func() *Decision {
		return &Decision{CallID: "c1", ArgsSHA256: ArgsHash("a", "t", nil), Outcome: Approve, Approver: "alice", DecidedAt: time.Now()}
	}
	tests := []struct {
		name   string
		mutate func(*Decision)
		valid  bool
	}{
		{"approve", func(*Decision) {}, true},
		{"reject with reason", func(d *Decision) { d.Outcome, d.Reason = Reject, "too broad" }, true},
		{"reject without reason", func(d *Decision) { d.Outcome = Reject }, false},
		{"reject with blank reason", func(d *Decision) { d.Outcome, d.Reason = Reject, "  " }, false},
		{"answer", func(d *Decision) { d.Outcome, d.Answer = Answer, "yes" }, true},
		{"empty answer", func(d *Decision) { d.Outcome = Answer }, false},
		{"unknown outcome", func(d *Decision) { d.Outcome = "maybe" }, false},
		{"call id with a dot", func(d *Decision) { d.CallID = "a.b" }, false},
		{"short hash", func(d *Decision) { d.ArgsSHA256 = "abc" }, false},
		{"uppercase hash", func(d *Decision) { d.ArgsSHA256 = "A" + d.ArgsSHA256[1:] }, false},
		{"no approver", func(d *Decision) { d.Approver = "" }, false},
		{"amendment on a reject", func(d *Decision) {
			d.Outcome, d.Reason, d.AlwaysAllow = Reject, "no", &Amendment{}
		}, false},
		{"no time", func(d *Decision) { d.DecidedAt = time.Time{} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ok()
			tt.mutate(d)
			err := d.Validate()
			if tt.valid && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !tt.valid && !errors.Is(err, ErrInvalidDecision) {
				t.Fatalf("Validate = %v, want ErrInvalidDecision", err)
			}
		})
	}
}
