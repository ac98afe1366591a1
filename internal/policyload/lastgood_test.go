package policyload

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// TestStartFailsClosed: what a worker applies at start after the key's
// history, never the built-in default once a policy was pushed.
func TestStartFailsClosed(t *testing.T) {
	acct := trusttest.NewAccount(t)
	v, err := trust.NewVerifier([]string{acct.Public}, nil)
	if err != nil {
		t.Fatal(err)
	}
	admin := acct.User(t, "admin", trust.RoleAdmin, 0)
	t0 := time.Now().Add(-time.Hour)
	sealed := func(doc string, at time.Time) []byte {
		b, err := Seal([]byte(doc), "p.yaml", admin, at)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	denyRead := sealed("tools:\n  default: allow\n  read:\n    action: deny\n", t0)
	denyBash := sealed("tools:\n  default: allow\n  bash:\n    action: deny\n", t0.Add(time.Minute))
	put, del := func(b []byte) []byte { return b }, []byte(nil)
	tests := []struct {
		name    string
		writes  [][]byte // nil deletes the key
		want    []byte   // the sealed policy in force; nil: the built-in default
		wantErr error
	}{
		{"never pushed", nil, nil, nil},
		{"good", [][]byte{denyRead}, denyRead, nil},
		{"good then garbage", [][]byte{denyRead, put([]byte(`{"status":"ok"}`))}, denyRead, nil},
		{"good then unsealed document", [][]byte{denyRead, []byte("tools: {default: allow}\n")}, denyRead, nil},
		{"good then deleted", [][]byte{denyRead, del}, denyRead, nil},
		{"newer then the older replayed", [][]byte{denyRead, denyBash, denyRead}, denyBash, nil},
		{"garbage only", [][]byte{[]byte("x")}, nil, ErrNoGoodPolicy},
		{"sealed by an agent only", [][]byte{func() []byte {
			b, _ := Seal([]byte("tools: {default: allow}\n"), "p", acct.User(t, "bot", trust.RoleAgent, 0), t0)
			return b
		}()}, nil, ErrNoGoodPolicy},
	}
	srv := testenv.StartNATS(t, "")
	_, js := srv.Connect(t)
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "policy" + string(rune('a'+i)), History: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.writes {
				if w == nil {
					err = kv.Delete(ctx, Key)
				} else {
					_, err = kv.Put(ctx, Key, w)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			gate := policy.NewGate(nil)
			l := &Loader{Gate: gate, KV: kv, Verifier: v, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			ch, err := l.Load(ctx)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Load = %+v, %v; want %v", ch, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := policy.Default().Revision()
			if tt.want != nil {
				doc, _, err := Open(tt.want, v)
				if err != nil {
					t.Fatal(err)
				}
				p, _, err := policy.Parse(doc, "kv:"+Key)
				if err != nil {
					t.Fatal(err)
				}
				want = p.Revision()
			}
			if got := gate.Policy().Revision(); got != want {
				t.Fatalf("revision %s in force (%+v), want %s", got, ch, want)
			}
		})
	}
}

// TestReplayedOlderPolicyRefused: a sealed policy pushed before the one
// in force, stored again, is refused while the worker runs.
func TestReplayedOlderPolicyRefused(t *testing.T) {
	acct := trusttest.NewAccount(t)
	v, _ := trust.NewVerifier([]string{acct.Public}, nil)
	admin := acct.User(t, "admin", trust.RoleAdmin, 0)
	old, _ := Seal([]byte("tools: {default: allow}\n"), "p", admin, time.Now().Add(-time.Hour))
	cur, _ := Seal([]byte("tools:\n  default: allow\n  bash:\n    action: deny\n"), "p", admin, time.Now())
	l := &Loader{Gate: policy.NewGate(nil), Verifier: v, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if ch := l.apply(cur, "kv:"+Key); ch.Err != nil {
		t.Fatal(ch.Err)
	}
	if ch := l.apply(old, "kv:"+Key); !errors.Is(ch.Err, ErrUnsignedPolicy) {
		t.Fatalf("replayed older policy: %+v", ch)
	}
}
