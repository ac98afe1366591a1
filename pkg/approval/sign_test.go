package approval

import (
	"encoding/json"
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
		{"edited arguments added", func(d *Decision) {
			_ = d.Edit("agent", "bash", []byte(`{"command":"rm -rf /"}`))
		}, trusted.Trusted, ErrBadSignature},
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

// TestSignVerifyEdited: the signature of an approval with changes covers
// both the edited arguments and their hash; changing either breaks it.
func TestSignVerifyEdited(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	trusted, _ := NewKeySet(pub)
	evil := json.RawMessage(`{"command":"rm -rf /"}`)
	tests := []struct {
		name   string
		mutate func(d *Decision)
		want   error
	}{
		{"valid", func(*Decision) {}, nil},
		{"edited arguments swapped", func(d *Decision) { d.EditedArguments = evil }, ErrBadSignature},
		{"edited arguments and hash swapped", func(d *Decision) {
			d.EditedArguments, d.EditedArgsSHA256 = evil, ArgsHash("agent", "bash", evil)
		}, ErrBadSignature},
		{"edit removed", func(d *Decision) { d.EditedArguments, d.EditedArgsSHA256 = nil, "" }, ErrBadSignature},
		{"edited hash swapped", func(d *Decision) { d.EditedArgsSHA256 = d.ArgsSHA256 }, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Decision{CallID: "call-1", ArgsSHA256: ArgsHash("agent", "bash", []byte(`{"command":"rm -rf x"}`)),
				Outcome: Approve, Approver: "alice", DecidedAt: time.Now()}
			if err := d.Edit("agent", "bash", []byte(`{ "command" : "ls" }`)); err != nil {
				t.Fatal(err)
			}
			if err := d.Sign(kp); err != nil {
				t.Fatal(err)
			}
			rt, err := jsonRoundTrip(d)
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(rt)
			err = rt.Verify(trusted.Trusted)
			if tt.want == nil && err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if tt.want == nil {
				if err := rt.CheckEdit("agent", "bash"); err != nil {
					t.Fatalf("CheckEdit: %v", err)
				}
				if string(rt.EditedArguments) != `{"command":"ls"}` {
					t.Fatalf("edited arguments %s, want the canonical form", rt.EditedArguments)
				}
			}
		})
	}
}

func TestCheckEdit(t *testing.T) {
	orig := ArgsHash("agent", "bash", []byte(`{"command":"rm -rf x"}`))
	edited := json.RawMessage(`{"command":"ls"}`)
	tests := []struct {
		name  string
		d     Decision
		agent string
		want  error
	}{
		{"no edit", Decision{ArgsSHA256: orig}, "agent", nil},
		{"edit", Decision{ArgsSHA256: orig, Outcome: Approve, EditedArguments: edited, EditedArgsSHA256: ArgsHash("agent", "bash", edited)}, "agent", nil},
		{"hash of other arguments", Decision{ArgsSHA256: orig, Outcome: Approve, EditedArguments: edited, EditedArgsSHA256: orig}, "agent", ErrEditedArgs},
		{"hash for another agent", Decision{ArgsSHA256: orig, Outcome: Approve, EditedArguments: edited, EditedArgsSHA256: ArgsHash("agent", "bash", edited)}, "other", ErrEditedArgs},
		{"hash without arguments", Decision{ArgsSHA256: orig, Outcome: Approve, EditedArgsSHA256: ArgsHash("agent", "bash", edited)}, "agent", ErrEditedArgs},
		{"not an object", Decision{ArgsSHA256: orig, Outcome: Approve, EditedArguments: json.RawMessage(`["ls"]`), EditedArgsSHA256: ArgsHash("agent", "bash", json.RawMessage(`["ls"]`))}, "agent", ErrEditedArgs},
		{"on a reject", Decision{ArgsSHA256: orig, Outcome: Reject, EditedArguments: edited, EditedArgsSHA256: ArgsHash("agent", "bash", edited)}, "agent", ErrEditedArgs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.d.CheckEdit(tt.agent, "bash")
			if tt.want == nil && err != nil {
				t.Fatalf("CheckEdit: %v", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("CheckEdit = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEditArgs(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`{ "b":1, "a":"x" }`, `{"a":"x","b":1}`, true},
		{`{"command":"ls > out && echo <ok>"}`, `{"command":"ls > out && echo <ok>"}`, true},
		{`{"a":1,"a":2}`, "", false},
		{`[1]`, "", false},
		{`"ls"`, "", false},
		{``, "", false},
		{`{"a":1} {}`, "", false},
		{`{"a":`, "", false},
	}
	for _, tt := range tests {
		got, err := EditArgs([]byte(tt.in))
		if tt.ok != (err == nil) || string(got) != tt.want {
			t.Errorf("EditArgs(%q) = %s, %v", tt.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrEditedArgs) {
			t.Errorf("EditArgs(%q) error %v is not ErrEditedArgs", tt.in, err)
		}
	}
	// An edit back to the parked arguments is no change.
	d := &Decision{ArgsSHA256: ArgsHash("a", "bash", []byte(`{"command":"ls"}`)), Outcome: Approve}
	if err := d.Edit("a", "bash", []byte(`{"command": "ls"}`)); err != nil || d.Edited() {
		t.Fatalf("edit to the same arguments: edited=%v err=%v", d.Edited(), err)
	}
}

func FuzzEditArgs(f *testing.F) {
	for _, s := range []string{`{"command":"ls"}`, `{"a":[1,{"b":null}]}`, `{"a":1,"a":2}`, `[]`, `{"\u003c":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := EditArgs(raw)
		if err != nil {
			return
		}
		// The canonical form is a fixed point and hashes the same.
		again, err := EditArgs(c)
		if err != nil || string(again) != string(c) {
			t.Fatalf("EditArgs(%q) = %q, again %q, %v", raw, c, again, err)
		}
		if ArgsHash("a", "t", c) != ArgsHash("a", "t", raw) {
			t.Fatalf("canonical form of %q hashes otherwise", raw)
		}
	})
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
		{"approve with changes", func(d *Decision) { _ = d.Edit("a", "t", []byte(`{"x":1}`)) }, true},
		{"changes on a reject", func(d *Decision) {
			_ = d.Edit("a", "t", []byte(`{"x":1}`))
			d.Outcome, d.Reason = Reject, "no"
		}, false},
		{"changes and always allow", func(d *Decision) {
			_ = d.Edit("a", "t", []byte(`{"x":1}`))
			d.AlwaysAllow = &Amendment{}
		}, false},
		{"edited hash without arguments", func(d *Decision) { d.EditedArgsSHA256 = d.ArgsSHA256 }, false},
		{"edited arguments with a bad hash", func(d *Decision) { d.EditedArguments, d.EditedArgsSHA256 = json.RawMessage(`{}`), "x" }, false},
		{"edited arguments not an object", func(d *Decision) {
			d.EditedArguments, d.EditedArgsSHA256 = json.RawMessage(`[]`), ArgsHash("a", "t", json.RawMessage(`[]`))
		}, false},
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
