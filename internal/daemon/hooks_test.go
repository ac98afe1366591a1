package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/hooks"
)

// TestBadHooksFileStopsTheWorkerSayingWhere: a worker given a hooks file
// with a mistake refuses to start, naming the file, the line and the
// mistake.
func TestBadHooksFileStopsTheWorkerSayingWhere(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hooks.yaml")
	if err := os.WriteFile(f, []byte("before:\n  - name: stamp\n    subject: toolgate.hook.*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), Options{HooksFile: f, Workspace: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard})
	if !errors.Is(err, hooks.ErrConfig) || !strings.Contains(err.Error(), f+":2: before[0] (stamp): subject \"toolgate.hook.*\"") {
		t.Fatalf("err = %v", err)
	}
}

func TestURLSecrets(t *testing.T) {
	for _, c := range []struct {
		url  string
		want []string
	}{
		{"", nil},
		{"nats://127.0.0.1:4222", nil},
		{"nats://worker:pw-1@a:4222,nats://worker:pw-2@b:4222", []string{"pw-1", "pw-2"}},
		{"nats://s3cr3t-token@a:4222", []string{"s3cr3t-token"}},
	} {
		if got := urlSecrets(c.url); !slices.Equal(got, c.want) {
			t.Errorf("urlSecrets(%q) = %v, want %v", c.url, got, c.want)
		}
	}
}
