package identity_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
)

// BenchmarkConnect measures a connection's set-up without and with a
// user JWT (nonce signature, JWT verification, permissions compiled).
func BenchmarkConnect(b *testing.B) {
	open := testenv.StartNATS(b, "")
	auth := testenv.StartAuthNATS(b)
	creds, _ := auth.Install.MintCreds(identity.RoleAgent, "bench")
	for _, c := range []struct {
		name string
		url  string
		opts []nats.Option
	}{
		{"none", open.ClientURL(), nil},
		{"jwt", auth.ClientURL(), creds.NATSOptions()},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				nc, err := nats.Connect(c.url, c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				nc.Close()
			}
		})
	}
}

// BenchmarkPublish measures publishing a call-sized message and a
// round trip, without and with per-subject permissions to check.
func BenchmarkPublish(b *testing.B) {
	open := testenv.StartNATS(b, "")
	auth := testenv.StartAuthNATS(b)
	payload := make([]byte, 512)
	for _, c := range []struct {
		name string
		nc   func() *nats.Conn
	}{
		{"none", func() *nats.Conn { nc, _ := open.Connect(b); return nc }},
		{"jwt", func() *nats.Conn { nc, _ := auth.ConnectAs(b, identity.RoleAgent, "bench"); return nc }},
	} {
		b.Run(c.name, func(b *testing.B) {
			nc := c.nc()
			for b.Loop() {
				if err := nc.Publish("toolgate.call.bench.read", payload); err != nil {
					b.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil || nc.LastError() != nil {
				b.Fatal(err, nc.LastError())
			}
		})
	}
}
