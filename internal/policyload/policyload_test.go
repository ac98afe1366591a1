package policyload

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
)

// TestInvalidFileAtStartIsReportedOnce: a policy file refused at start is
// the error Load returns, not also an error in the log (the worker would
// print it twice).
func TestInvalidFileAtStartIsReportedOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("tools:\n  bash:\n    actoin: ask\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var changes []Change
	l := &Loader{Gate: policy.NewGate(nil), File: file, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnChange: func(ch Change) { changes = append(changes, ch) }}
	_, err := l.Load(context.Background())
	if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "actoin") {
		t.Fatalf("Load = %v, want the invalid policy", err)
	}
	if logs.Len() > 0 {
		t.Fatalf("the refusal was also logged:\n%s", &logs)
	}
	if len(changes) != 1 || changes[0].Err == nil {
		t.Fatalf("OnChange heard %+v, want the one refusal", changes)
	}
}

// TestInvalidReloadIsLogged: a refused reload has no caller to return to;
// it is logged, once, and the policy in force stays.
func TestInvalidReloadIsLogged(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("default: allow\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	l := &Loader{Gate: policy.NewGate(nil), File: file, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	first, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	l.applyIfNew([]byte("default: perhaps\n"), "file:"+file)
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "policy in force stays") {
		t.Fatalf("%d error records for a refused reload:\n%s", n, &logs)
	}
	if got := l.Gate.Policy().Revision(); got != first.Revision {
		t.Fatalf("revision %s after a refused reload, want %s", got, first.Revision)
	}
}

// TestEmptyPolicyIsRefused: a file holding only blanks and comments (a
// truncated file, mid-write) is never the empty policy: refused at
// start, refused on reload with the policy in force kept, and never
// pushed.
func TestEmptyPolicyIsRefused(t *testing.T) {
	for _, doc := range []string{"", "\n  \n", "# only a comment\n"} {
		file := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		l := &Loader{Gate: policy.NewGate(nil), File: file, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if _, err := l.Load(context.Background()); !errors.Is(err, ErrEmptyPolicy) {
			t.Fatalf("Load(%q) = %v, want ErrEmptyPolicy", doc, err)
		}
		if err := os.WriteFile(file, []byte("default: deny\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		first, err := l.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ch := l.apply([]byte(doc), "file:"+file); !errors.Is(ch.Err, ErrEmptyPolicy) || l.Gate.Policy().Revision() != first.Revision {
			t.Fatalf("reload of %q: %v, revision %s, want refused and %s kept", doc, ch.Err, l.Gate.Policy().Revision(), first.Revision)
		}
		if _, _, err := Push(context.Background(), nil, []byte(doc), "x", trust.Signer{}); !errors.Is(err, ErrEmptyPolicy) {
			t.Fatalf("Push(%q) = %v, want ErrEmptyPolicy", doc, err)
		}
	}
}
