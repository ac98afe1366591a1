package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
)

// TestForeignServerSaysWhatToDo: a worker whose state directory is not
// the one the server's install lives in is refused with a message naming
// that directory and what to do, not a bare authorization violation.
func TestForeignServerSaysWhatToDo(t *testing.T) {
	s := testenv.StartAuthNATS(t) // an install of its own
	state, err := identity.StatePath()
	if err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), Options{NATSURL: s.ClientURL(), Workspace: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: io.Discard})
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "minted from the state directory "+state) ||
		!strings.Contains(err.Error(), identity.EnvStateDir) {
		t.Fatalf("err = %v", err)
	}
}
