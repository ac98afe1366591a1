package testenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
)

// AuthServer is a real nats-server in operator mode trusting a fresh
// install (its own keys in a temp dir), as the embedded default runs.
type AuthServer struct {
	*Server
	// Install holds the keys; Creds mints users from it.
	Install *identity.Install
	// StateDir is the temp directory the server stores in.
	StateDir string
}

// StartAuthNATS starts an authenticated nats-server with JetStream on a
// random loopback port. It is shut down when the test ends.
func StartAuthNATS(t testing.TB) *AuthServer {
	t.Helper()
	in, err := identity.LoadOrCreate(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatalf("install keys: %v", err)
	}
	return StartAuthNATSWith(t, in)
}

// StartAuthNATSWith is StartAuthNATS trusting the given install.
func StartAuthNATSWith(t testing.TB, in *identity.Install) *AuthServer {
	t.Helper()
	state := t.TempDir()
	opts := &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(state, "jetstream"),
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20,
	}
	if err := embedded.Trust(opts, in); err != nil {
		t.Fatalf("trust: %v", err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not become ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return &AuthServer{Server: &Server{Server: s, Dir: opts.StoreDir}, Install: in, StateDir: state}
}

// Creds mints credentials of role for name and writes them to a 0600
// .creds file in a temp dir; Path holds its name.
func (s *AuthServer) Creds(t testing.TB, role identity.Role, name string) *identity.Creds {
	t.Helper()
	b, err := s.Install.Mint(role, name)
	if err != nil {
		t.Fatalf("mint %s %s: %v", role, name, err)
	}
	path := filepath.Join(t.TempDir(), string(role)+"-"+name+".creds")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := identity.LoadCreds(path)
	if err != nil {
		t.Fatalf("load creds: %v", err)
	}
	return c
}

// ConnectAs opens a connection authenticated as role name (with its
// inbox prefix), closed when the test ends.
func (s *AuthServer) ConnectAs(t testing.TB, role identity.Role, name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	c := s.Creds(t, role, name)
	return s.Connect(t, append(c.NATSOptions(), opts...)...)
}

// ConnectUnlimited connects to url as a user of the account whose key is
// account, without permission limits: what anyone in that account could
// at most reach (and what the server itself may publish there). It is
// closed when the test ends.
func ConnectUnlimited(t testing.TB, url string, account nkeys.KeyPair) *nats.Conn {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "unlimited"
	tok, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.UserJWT(func() (string, error) { return tok, nil },
		func(n []byte) ([]byte, error) { return ukp.Sign(n) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
