package identity_test

import (
	"errors"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/trust"
)

// TestSigningJWT: the signing JWT of a worker's credentials names the
// same identity for the same key, issued by the same account, so that
// an event signed with it verifies as the worker's; it is far shorter;
// and the key with it can neither publish nor subscribe anything on the
// bus (a publish through it never reaches a subscriber). Credentials
// another install issued get none.
func TestSigningJWT(t *testing.T) {
	s := testenv.StartAuthNATS(t)
	creds, err := s.Install.MintCreds(identity.RoleWorker, "worker")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Install.SigningJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Subject != creds.Claims.Subject || uc.Issuer != creds.Claims.Issuer || uc.Name != creds.Claims.Name ||
		!uc.Tags.Contains(identity.RoleWorker.Tag()) || len(uc.Tags) != len(creds.Claims.Tags) {
		t.Fatalf("signing JWT names %s %q %v issued by %s; the credentials %s %q %v by %s",
			uc.Subject, uc.Name, uc.Tags, uc.Issuer, creds.Claims.Subject, creds.Claims.Name, creds.Claims.Tags, creds.Claims.Issuer)
	}
	t.Logf("signing JWT %d bytes, the credentials' %d", len(tok), len(creds.JWT))
	if len(tok)*2 > len(creds.JWT) {
		t.Errorf("signing JWT %d bytes, the credentials' %d: not shorter by half", len(tok), len(creds.JWT))
	}

	// An event signed with it verifies as the worker's.
	tv, err := trust.NewVerifier([]string{creds.Account}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sign := eventsig.SignTogether(trust.Signer{Key: creds.Key, JWT: tok})
	u, err := events.EncodeUnsigned(events.ResultSubject("a", "c1"), events.Attrs{ID: events.AgentKey("a", "c1") + ":result",
		Source: "toolgate://worker/w1", Type: events.TypeCallCompleted, Subject: "c1"},
		events.ResultData{CallID: "c1", Agent: "a", Tool: "read", Status: events.StatusOK}, events.Binary)
	if err != nil {
		t.Fatal(err)
	}
	sigs, signer, err := sign([][]byte{u.Input()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := u.Signed(sigs[0], signer)
	if err != nil {
		t.Fatal(err)
	}
	r, err := eventsig.New(tv).Result(m.Header, m.Data, "a", "c1", "read")
	if err != nil || r.CallID != "c1" {
		t.Fatalf("result signed with the signing JWT: %v", err)
	}

	// The key with it reaches nothing on the bus: an admin listening
	// hears the worker's own publish, never the one made with it.
	admin, err := s.Install.MintCreds(identity.RoleAdmin, "alice")
	if err != nil {
		t.Fatal(err)
	}
	listener, err := nats.Connect(s.ClientURL(), admin.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	got := make(chan *nats.Msg, 4)
	if _, err := listener.ChanSubscribe("toolgate.audit.>", got); err != nil {
		t.Fatal(err)
	}
	if err := listener.Flush(); err != nil {
		t.Fatal(err)
	}
	worker, err := nats.Connect(s.ClientURL(), creds.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	denied := make(chan error, 4)
	nc, err := nats.Connect(s.ClientURL(), nats.UserJWTAndSeed(tok, seedOf(t, creds)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	if err == nil {
		defer nc.Close()
		_ = nc.Publish("toolgate.audit.a.read", []byte("forged"))
		_ = nc.Flush() // the server has handled the publish
		if _, err := nc.SubscribeSync("toolgate.result.>"); err == nil {
			_ = nc.Flush()
		}
	}
	if err := worker.Publish("toolgate.audit.a.read", []byte("marker")); err != nil {
		t.Fatal(err)
	}
	if m := testenv.Recv(t, got, "the marker"); string(m.Data) != "marker" {
		t.Fatalf("a publish with the signing JWT reached a subscriber: %q", m.Data)
	}
	if nc != nil {
		if err := testenv.Recv(t, denied, "the permission violation"); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("the signing JWT's publish: %v, want a permission violation", err)
		}
	}

	other, _ := identity.LoadOrCreate(t.TempDir())
	foreign, _ := other.MintCreds(identity.RoleWorker, "worker")
	if _, err := s.Install.SigningJWT(foreign); !errors.Is(err, identity.ErrWrongIdentity) {
		t.Errorf("SigningJWT of another install's credentials: %v, want ErrWrongIdentity", err)
	}
}

// seedOf is the seed of the credentials' key.
func seedOf(t *testing.T, c *identity.Creds) string {
	t.Helper()
	seed, err := c.Key.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return string(seed)
}
