package image

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/toolgate/toolgate/deploy/check/internal/need"
)

// TestImages builds the three images into an OCI layout, reads them back
// from it, and runs them: each binary reports its version from inside its
// image's filesystem, the dpkg database lists what each ships, the
// worker's sandbox tools work there (/bin/sh, awk and which among them:
// the maintainer scripts ran), and a worker started from the image
// answers bash calls that run git, sh, awk, which and rg in its
// bubblewrap sandbox.
func TestImages(t *testing.T) {
	for _, p := range [][2]string{{"apt-get", "apt"}, {"apt-cache", "apt"}, {"dpkg-deb", "dpkg"}, {"go", "golang-go"}} {
		need.Program(t, p[0], p[1])
	}
	bwrap := need.Program(t, "bwrap", "bubblewrap")
	out := os.Getenv("TOOLGATE_IMAGE_OUT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "oci")
	}
	ctx := context.Background()
	epoch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	arches := []string{hostArch}
	if hostArch != "arm64" {
		if why := foreignMissing(ctx, "arm64"); why != "" {
			msg := "arm64 images skipped: " + why + " (dpkg --add-architecture arm64 && apt-get update; .ci/run does)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Log(msg)
		} else {
			arches = append(arches, "arm64")
		}
	}
	if _, err := Build(ctx, Options{Repo: "../../..", Out: out, Tag: "test", Epoch: epoch, Log: testWriter{t}, Arches: arches}); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]v1.Image{}
	foreign := map[string]v1.Image{}
	for _, d := range im.Manifests {
		ref := d.Annotations["org.opencontainers.image.ref.name"]
		name := strings.TrimSuffix(strings.TrimPrefix(ref, "toolgate/"), ":test")
		inner, err := idx.ImageIndex(d.Digest)
		if err != nil {
			t.Fatalf("%s: not an image index: %v", ref, err)
		}
		m, err := inner.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var plats []string
		for _, md := range m.Manifests {
			if md.Platform == nil || md.Platform.OS != "linux" {
				t.Fatalf("%s: a manifest without its platform: %+v", ref, md)
			}
			plats = append(plats, md.Platform.Architecture)
			img, err := inner.Image(md.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil || cf.Architecture != md.Platform.Architecture {
				t.Fatalf("%s: the %s manifest's config says %v (%v)", ref, md.Platform.Architecture, cf.Architecture, err)
			}
			if md.Platform.Architecture == hostArch {
				images[name] = img
			} else {
				foreign[name] = img
			}
		}
		if !slices.Equal(plats, arches) {
			t.Errorf("%s: platforms %v, want %v", ref, plats, arches)
		}
	}
	for name, img := range foreign {
		t.Run(name+"/arm64", func(t *testing.T) { checkForeign(t, name, img) })
	}
	for _, spec := range Images {
		t.Run(spec.Name, func(t *testing.T) {
			img, ok := images[spec.Name]
			if !ok {
				t.Fatalf("no toolgate/%s:test in the layout (%v)", spec.Name, slices.Collect(mapsKeys(images)))
			}
			checkConfig(t, spec, img)
			root := unpack(t, img)
			checkDpkgStatus(t, spec, root)
			line := inImage(t, bwrap, root, nil, "/usr/local/bin/"+spec.Name, "--version")
			// A clone stamps the commit; a linked checkout (git worktree)
			// gets none, and the line says so.
			if !regexp.MustCompile(`^` + spec.Name + ` (\S+ commit \S+ built \S+|\(devel\) from \S+ source without version control information \(.*\)) go\S+\n$`).MatchString(line) {
				t.Fatalf("%s --version in the image printed %q", spec.Name, line)
			}
			if spec.Name == "worker" {
				checkWorkerTools(t, bwrap, root)
				runWorker(t, bwrap, root)
				testMaskedProc(t, bwrap, root)
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mapsKeys(m map[string]v1.Image) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkConfig: non-root by default, the volumes, the health check, and
// the ownership of what the user writes to.
func checkConfig(t *testing.T, spec Image, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", c.User)
	}
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/usr/local/bin/"+spec.Name {
		t.Errorf("entrypoint %v", c.Entrypoint)
	}
	for _, v := range spec.Volumes {
		if _, ok := c.Volumes[v]; !ok {
			t.Errorf("no volume %s in %v", v, c.Volumes)
		}
	}
	if spec.Healthcheck != nil && (c.Healthcheck == nil || !slices.Contains(c.Healthcheck.Test, "--healthcheck") ||
		!strings.HasSuffix(c.Healthcheck.Test[len(c.Healthcheck.Test)-1], "/healthz")) {
		t.Errorf("healthcheck %+v, want --healthcheck .../healthz", c.Healthcheck)
	}
	if cf.Created.Time.IsZero() || cf.OS != "linux" {
		t.Errorf("created %v, os %q", cf.Created, cf.OS)
	}
	// The volumes belong to the user; everything else to root, so the
	// user cannot change the image's programs.
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if slices.Contains(spec.Volumes, name) {
			seen[name] = true
			if h.Uid != UID || h.Gid != UID {
				t.Errorf("%s owned by %d:%d, want %d", name, h.Uid, h.Gid, UID)
			}
		} else if h.Uid != 0 && !strings.HasPrefix(name+"/", spec.Volumes[0]+"/") {
			t.Errorf("%s owned by %d, want root", name, h.Uid)
		}
		if name == "/usr/local/bin/"+spec.Name && h.Mode&0o022 != 0 {
			t.Errorf("%s mode %o is writable by others", name, h.Mode)
		}
	}
	for _, v := range spec.Volumes {
		if !seen[v] {
			t.Errorf("the image has no directory %s", v)
		}
	}
}

// unpack writes the image's flattened filesystem to a directory.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			_ = os.Chmod(p, os.FileMode(h.Mode&0o7777)|os.ModeDir)
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				t.Fatal(err)
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(root, filepath.Clean("/"+h.Linkname)), p); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	// The unpacked tree is the image's user's to write, as its volumes are.
	for _, d := range []string{StateDir, Work, "/tmp"} {
		_ = os.MkdirAll(filepath.Join(root, d), 0o777)
		_ = os.Chmod(filepath.Join(root, d), 0o1777)
	}
	return root
}

// inImage runs argv with root as the root directory, as the image's
// user in a user namespace of its own (no container runtime needed), and
// returns its standard output.
func inImage(t *testing.T, bwrap, root string, env []string, argv ...string) string {
	t.Helper()
	out, err := runInImage(bwrap, root, env, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runInImage is inImage returning what failed, its output included.
func runInImage(bwrap, root string, env []string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bwrap, append(bwrapArgs(root, env), argv...)...)
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), fmt.Errorf("%v in the image: %w\n%s%s", argv, err, out, ee.Stderr)
		}
		return string(out), fmt.Errorf("%v in the image: %w", argv, err)
	}
	return string(out), nil
}

// bwrapArgs run a program in the image's filesystem as a container
// runtime would, with the host's /proc unmasked (as the chart's
// procMount: Unmasked gives a pod): bwrap, inside, mounts a /proc of its
// own, which the kernel refuses while parts of the /proc above are
// covered. maskedProc covers them as a runtime's default does.
func bwrapArgs(root string, env []string, maskedProc ...bool) []string {
	proc := []string{"--bind", "/proc", "/proc"}
	if len(maskedProc) > 0 && maskedProc[0] {
		proc = []string{"--unshare-pid", "--proc", "/proc"} // bwrap covers /proc/sys and others read-only
	}
	a := append([]string{"--bind", root, "/", "--dev", "/dev"}, proc...)
	a = append(a, "--unshare-user", "--uid", fmt.Sprint(UID), "--gid", fmt.Sprint(UID), "--die-with-parent",
		"--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", StateDir,
		"--setenv", "TOOLGATE_STATE_DIR", StateDir, "--chdir", Work)
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		a = append(a, "--setenv", k, v)
	}
	return a
}

// checkWorkerTools: what the worker's tools run is in its image and works
// there, bubblewrap included (a sandbox inside the image's filesystem).
func checkWorkerTools(t *testing.T, bwrap, root string) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"git", "--version"}, "git version"},
		{[]string{"rg", "--version"}, "ripgrep"},
		{[]string{"bash", "-c", "echo $((6*7)) | sed s/42/forty-two/"}, "forty-two"},
		{[]string{"bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net", "--cap-drop", "ALL", "bash", "-c", "echo sandboxed"}, "sandboxed"},
		{[]string{"id", "-un"}, User},
		{[]string{"/bin/sh", "-c", "echo sh-ok"}, "sh-ok"},
		{[]string{"sh", "-c", "echo 1 2 | awk '{print $2}'; which git"}, "2\n/usr/bin/git"},
	} {
		if out, err := runInImage(bwrap, root, nil, c.argv...); err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%v in the image printed %q (%v), want %q", c.argv, out, err, c.want)
		}
	}
}

// runWorker starts the image's worker as its entrypoint and default
// arguments do (the sandbox required, the embedded NATS server), waits
// for /readyz, and has the image's toolctl run a bash call: it succeeds
// only if the worker built its bubblewrap sandbox inside the image.
func runWorker(t *testing.T, bwrap, root string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := ln.Addr().String()
	ln.Close()
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	natsAddr := ln.Addr().String()
	ln.Close()
	// A policy that lets bash run what these calls run, and a repository
	// in the workspace (git init asks a person under any policy).
	policy := "version: 1\ndefault: deny\ntools:\n  bash: allow\n  write: allow\n"
	if err := os.WriteFile(filepath.Join(root, StateDir, "policy.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	inImage(t, bwrap, root, nil, "git", "init", "-q", "repo")
	for _, f := range []string{"f", "new"} {
		if err := os.WriteFile(filepath.Join(root, Work, "repo", f), []byte("hi\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inImage(t, bwrap, root, nil, "git", "-C", "repo", "add", "f")
	inImage(t, bwrap, root, nil, "git", "-C", "repo", "-c", "user.name=a", "-c", "user.email=a@example.com", "commit", "-qm", "first")
	var logs strings.Builder
	w := exec.Command(bwrap, append(bwrapArgs(root, nil), "/usr/local/bin/worker", "--workspace="+Work,
		"--sandbox=require", "--metrics-listen="+metrics, "--listen="+natsAddr, "--policy="+StateDir+"/policy.yaml")...)
	w.Env, w.Stdout, w.Stderr = []string{}, &logs, &logs
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	defer func() {
		_ = w.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = w.Process.Kill()
			<-done
		}
	}()
	ready := false
	for i := 0; i < 240 && !ready; i++ {
		select {
		case err := <-done:
			t.Fatalf("the worker exited: %v\n%s", err, logs.String())
		case <-time.After(250 * time.Millisecond):
		}
		if res, err := http.Get("http://" + metrics + "/readyz"); err == nil {
			ready = res.StatusCode == 200
			res.Body.Close()
		}
	}
	if !ready {
		t.Fatalf("the worker was not ready after 60s:\n%s", logs.String())
	}
	inImage(t, bwrap, root, nil, "/usr/local/bin/worker", "--healthcheck", "http://"+metrics+"/healthz")
	// What agents run through the bash tool, each in the worker's own
	// sandbox: git (a #!/bin/sh wrapper around the real git), sh, awk
	// (Debian's alternatives link), which, rg, and a repository made,
	// committed to in the workspace and read back.
	for _, c := range []struct{ command, want string }{
		{"echo from-the-sandbox", "from-the-sandbox"},
		{"git --version", "git version"},
		{"sh -c 'echo sh-ok'", "sh-ok"},
		{"/bin/sh -c 'echo binsh-ok'", "binsh-ok"},
		{"echo alpha beta | awk '{print $2}'", "beta"},
		{"which git rg", "/usr/bin/git\n/usr/bin/rg"},
		{"rg --version", "ripgrep"},
		{"printf 'needle\\n' > found.txt && rg -c needle found.txt", "1"},
		{"cd repo && git log --format=%s && git status --short", "first\n?? new"},
	} {
		call, err := runInImage(bwrap, root, []string{"NATS_URL=nats://" + natsAddr},
			"/usr/local/bin/toolctl", "call", "--timeout", "60s", "bash", "command="+c.command)
		if err != nil || !strings.Contains(call, c.want) {
			t.Errorf("bash call %q printed %q (%v), want %q", c.command, call, err, c.want)
		} else {
			t.Logf("bash call %q: %q", c.command, strings.TrimSpace(call))
		}
	}
}

// testMaskedProc: where bubblewrap cannot build its
// sandbox (a /proc with covered parts, a container runtime's default),
// the image's worker does not start, and says why, instead of running
// commands unsandboxed.
func testMaskedProc(t *testing.T, bwrap, root string) {
	cmd := exec.Command(bwrap, append(bwrapArgs(root, nil, true), "/usr/local/bin/worker", "--workspace="+Work,
		"--sandbox=require", "--listen=127.0.0.1:0")...)
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "bwrap") {
		t.Fatalf("the worker under a masked /proc: %v\n%s", err, out)
	}
	t.Logf("the worker refused, as it should:\n%s", strings.TrimSpace(string(out)))
}

// checkDpkgStatus: the image's dpkg database lists what it ships, as
// scanners (Trivy, Grype) read it: every package of the worker's base
// installed, with its version and architecture; the other images, only
// ca-certificates (the one file of it they carry).
func checkDpkgStatus(t *testing.T, spec Image, root string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		t.Fatalf("no dpkg database for scanners: %v", err)
	}
	pkgs := map[string]string{}
	for _, para := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		f := map[string]string{}
		for _, l := range strings.Split(para, "\n") {
			if k, v, ok := strings.Cut(l, ": "); ok && !strings.HasPrefix(l, " ") {
				f[k] = v
			}
		}
		if f["Status"] != "install ok installed" || f["Version"] == "" || f["Architecture"] == "" {
			t.Errorf("dpkg status entry %q: status %q, version %q, architecture %q", f["Package"], f["Status"], f["Version"], f["Architecture"])
		}
		pkgs[f["Package"]] = f["Version"]
	}
	want := []string{"ca-certificates"}
	if spec.Debian != nil {
		want = append(spec.Debian, "libc6", "perl-base")
	} else if len(pkgs) != 1 {
		t.Errorf("dpkg status lists %d packages, want ca-certificates only: %v", len(pkgs), pkgs)
	}
	for _, p := range want {
		if pkgs[p] == "" {
			t.Errorf("dpkg status lacks %s (has %d packages)", p, len(pkgs))
		}
	}
	t.Logf("dpkg status: %d packages (bash %s, git %s)", len(pkgs), pkgs["bash"], pkgs["git"])
}

// foreignMissing says why arch's Debian packages cannot be downloaded
// here, or "" when they can.
func foreignMissing(ctx context.Context, arch string) string {
	out, err := exec.CommandContext(ctx, "apt-cache", "policy", "bash:"+arch).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Candidate:") || strings.Contains(string(out), "Candidate: (none)") {
		return "apt has no " + arch + " packages"
	}
	return ""
}

// checkForeign checks an image of an architecture this machine cannot
// run: its binaries are built for it, its dpkg database lists its
// packages for it, and what the maintainer scripts made is there (/bin/sh,
// the alternatives, the users, the CA bundle).
func checkForeign(t *testing.T, name string, img v1.Image) {
	root := unpack(t, img)
	for _, spec := range Images {
		if spec.Name != name {
			continue
		}
		for _, bin := range append([]string{spec.Name}, spec.Also...) {
			f, err := elf.Open(filepath.Join(root, "usr/local/bin", bin))
			if err != nil {
				t.Fatal(err)
			}
			if f.Machine != elf.EM_AARCH64 {
				t.Errorf("%s: built for %v", bin, f.Machine)
			}
			f.Close()
		}
		pkgs, err := readStatus(filepath.Join(root, "var/lib/dpkg/status"))
		if err != nil {
			t.Fatal(err)
		}
		arch := map[string]string{}
		for _, p := range pkgs {
			arch[p["Package"]] = p["Architecture"]
			if p["Status"] != "install ok installed" || p["Version"] == "" {
				t.Errorf("dpkg status entry %v", p)
			}
		}
		if spec.Debian == nil {
			if len(pkgs) != 1 || arch["ca-certificates"] != "all" {
				t.Errorf("dpkg status %v, want ca-certificates only", arch)
			}
			continue
		}
		for _, p := range []string{"bash", "git", "libc6", "ripgrep", "bubblewrap"} {
			if arch[p] != "arm64" {
				t.Errorf("dpkg status: %s is %q, want arm64", p, arch[p])
			}
		}
		for link, want := range map[string]string{"bin/sh": "dash", "usr/bin/awk": "/etc/alternatives/awk", "etc/alternatives/awk": "/usr/bin/mawk",
			"usr/bin/which": "/etc/alternatives/which"} {
			if got, err := os.Readlink(filepath.Join(root, link)); err != nil || got != want {
				t.Errorf("/%s -> %q (%v), want %q", link, got, err, want)
			}
		}
		for _, f := range []string{"usr/bin/mawk", "bin/dash", "usr/bin/git", "etc/ssl/certs/ca-certificates.crt", "etc/passwd"} {
			if fi, err := os.Stat(filepath.Join(root, f)); err != nil || fi.Size() == 0 {
				t.Errorf("/%s: %v", f, err)
			}
		}
		if _, err := os.Stat(filepath.Join(root, "etc/ld.so.cache")); err == nil {
			t.Error("/etc/ld.so.cache of the other architecture copied")
		}
		t.Logf("arm64 %s: %d packages, bash %s", name, len(pkgs), arch["bash"])
	}
}
