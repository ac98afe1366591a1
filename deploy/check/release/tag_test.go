package release

import (
	"context"
	"debug/buildinfo"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/deploy/check/internal/need"
)

// TestTaggedRelease releases a tag as the release pipeline does, from a
// clone checked out at it: every binary reports the tag (and the one for
// this machine prints it), the archive is named for it; a version the
// checkout is not tagged with, a release without a key, and a key the
// allowed_signers file does not list are refused before anything is
// built.
func TestTaggedRelease(t *testing.T) {
	git := need.Program(t, "git", "git")
	const tag = "v0.98.7"
	clone := filepath.Join(t.TempDir(), "toolgate")
	head, err := exec.Command(git, "-C", "../../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	for _, args := range [][]string{
		{"clone", "-q", "--no-checkout", "../../..", clone},
		{"-C", clone, "checkout", "-q", strings.TrimSpace(string(head))},
		{"-C", clone, "-c", "user.name=release", "-c", "user.email=release@example.com", "tag", tag},
	} {
		if b, err := exec.Command(git, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	key, allowed := throwawayKey(t)
	host := Platform{runtime.GOOS, runtime.GOARCH}
	opts := func(version string) Options {
		return Options{Repo: clone, Out: filepath.Join(t.TempDir(), "dist"), Version: version, Epoch: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			Log: testLog{t}, Platforms: []Platform{host}, SigningKey: key, AllowedSigners: allowed}
	}
	ctx := context.Background()

	o := opts(tag)
	if _, err := Build(ctx, o); err != nil {
		t.Fatal(err)
	}
	base := "toolgate_0.98.7_" + host.String()
	dir := filepath.Join(t.TempDir(), "x")
	untar(t, filepath.Join(o.Out, base+".tar.gz"), dir)
	for _, c := range Commands {
		bi, err := buildinfo.ReadFile(filepath.Join(dir, base, c))
		if err != nil || bi.Main.Version != tag {
			t.Errorf("%s in %s.tar.gz: version %v (%v), want %s", c, base, bi, err, tag)
		}
	}
	for _, c := range []string{"worker", "toolgate-sandbox-init"} {
		out, err := exec.Command(filepath.Join(dir, base, c), "--version").Output()
		if err != nil || !strings.HasPrefix(string(out), c+" "+tag+" commit ") {
			t.Errorf("%s --version: %q %v", c, out, err)
		}
	}

	for _, c := range []struct {
		name string
		o    Options
		want error
	}{
		{"a tag the checkout lacks", opts("v0.98.8"), ErrVersion},
		{"no signing key", func() Options { o := opts(tag); o.SigningKey = nil; return o }(), nil},
		{"a key allowed_signers does not list", func() Options {
			o := opts(tag)
			o.SigningKey, _ = throwawayKey(t)
			return o
		}(), ErrNotAllowed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Build(ctx, c.o)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("Build: %v, want %v", err, c.want)
			}
			if _, serr := os.Stat(c.o.Out); serr == nil {
				t.Errorf("refused, but wrote %s", c.o.Out)
			}
			t.Logf("refused: %v", err)
		})
	}
}
