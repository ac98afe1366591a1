package policyload

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
)

// brokenExample is a valid document whose one example does not come out
// as written.
const brokenExample = "tools: {read: allow}\nexamples:\n  - {tool: read, args: {path: a}, expect: deny}\n"

// TestFailingExampleIsRefused: a policy whose example fails is refused
// like an invalid document: at start, on reload (the policy in force
// stays and the log says why) and on push.
func TestFailingExampleIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(brokenExample), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	l := &Loader{Gate: policy.NewGate(nil), File: file, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if _, err := l.Load(context.Background()); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "examples[0]") {
		t.Fatalf("Load = %v, want the failing example refused", err)
	}
	if err := os.WriteFile(file, []byte("tools: {read: deny}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	l.applyIfNew([]byte(brokenExample), "file:"+file)
	if got := l.Gate.Policy().Revision(); got != first.Revision {
		t.Fatalf("revision %s after a refused reload, want %s kept", got, first.Revision)
	}
	if !strings.Contains(logs.String(), "examples[0]") || !strings.Contains(logs.String(), "expected deny, got allow") {
		t.Fatalf("the log does not say which example failed:\n%s", &logs)
	}
	if _, _, err := Push(context.Background(), nil, []byte(brokenExample), "x", trust.Signer{}); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("Push = %v, want the failing example refused", err)
	}
}
