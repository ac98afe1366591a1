package image

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/toolgate/toolgate/deploy/check/internal/need"
)

// TestCheckVersion: images tagged with a release version are refused
// when their binaries report another (here a build with no VCS stamp,
// "(devel)"); other tags (dev, a snapshot) take any build.
func TestCheckVersion(t *testing.T) {
	need.Program(t, "go", "golang-go")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", bin+"/", "./cmd/toolgate-sandbox-init")
	build.Dir = "../../.."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	names := []string{"toolgate-sandbox-init"}
	for _, c := range []struct {
		tag  string
		want error
	}{
		{"v1.2.3", ErrVersion},
		{"v1.2.3-rc.1", ErrVersion},
		{"dev", nil},
		{"0.0.0-SNAPSHOT-abc", nil},
	} {
		if _, err := checkVersion(bin, names, c.tag); !errors.Is(err, c.want) {
			t.Errorf("tag %s: %v, want %v", c.tag, err, c.want)
		}
	}
}
