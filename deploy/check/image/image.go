// Package image builds toolgate's container images without a Docker
// daemon or a registry: the worker's base is assembled from Debian
// packages (apt-get download, then dpkg-deb -x: bubblewrap, git, ripgrep,
// bash and the userland a sandboxed command expects, with their
// dependencies), the binaries are built static (CGO_ENABLED=0), and
// go-containerregistry writes the images to an OCI image layout, which
// skopeo, crane or `docker load` (after `skopeo copy`) take from there.
//
// Every image runs as the non-root user toolgate (65532), keeps its state
// in the volume /var/lib/toolgate (the worker also /workspace), and the
// services carry a HEALTHCHECK on /healthz.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The non-root user every image runs as.
const (
	UID      = 65532
	User     = "toolgate"
	StateDir = "/var/lib/toolgate"
	Work     = "/workspace"
)

// WorkerPackages are the Debian packages of the worker's base, besides
// their dependencies: the sandbox (bubblewrap), the tools' programs (git,
// ripgrep) and the shell and utilities a sandboxed command runs.
var WorkerPackages = []string{"bubblewrap", "git", "ripgrep", "ca-certificates", "bash", "coreutils",
	"findutils", "grep", "sed", "diffutils"}

// notInstalled are packages apt-cache lists only as alternatives of a
// dependency another package already satisfies (debconf's frontends, awk
// implementations besides mawk).
var notInstalled = map[string]bool{"cdebconf": true, "libdebian-installer4": true, "libnewt0.52": true,
	"libslang2": true, "libtextwrap1": true, "gawk": true, "original-awk": true, "libsigsegv2": true, "libmpfr6": true}

// Image is one image to build.
type Image struct {
	Name        string   // worker, approver, toolctl
	Also        []string // further commands in /usr/local/bin
	Debian      []string // packages of the base; nil: certificates only
	Cmd         []string // default arguments
	Healthcheck []string // nil: none
	Ports       []string // exposed, "9464/tcp"
	Volumes     []string
}

// Images are toolgate's three images.
var Images = []Image{
	// toolctl beside the worker: kubectl exec ... toolctl for an operator.
	// toolgate-sandbox-init beside the worker: the first program of a
	// sandboxed call whose execution is restricted (small: cheap to start).
	{Name: "worker", Debian: WorkerPackages, Also: []string{"toolctl", "toolgate-sandbox-init"},
		Cmd:         []string{"--workspace=" + Work, "--metrics-listen=0.0.0.0:9464", "--sandbox=require"},
		Healthcheck: []string{"CMD", "/usr/local/bin/worker", "--healthcheck", "http://127.0.0.1:9464/healthz"},
		Ports:       []string{"9464/tcp"}, Volumes: []string{StateDir, Work}},
	{Name: "approver",
		Cmd:         []string{"--listen=0.0.0.0:8470", "--metrics-listen=0.0.0.0:9465"},
		Healthcheck: []string{"CMD", "/usr/local/bin/approver", "--healthcheck", "http://127.0.0.1:8470/healthz"},
		Ports:       []string{"8470/tcp", "9465/tcp"}, Volumes: []string{StateDir}},
	{Name: "toolctl", Cmd: []string{"--help"}, Volumes: []string{StateDir}},
}

// Options configure a build.
type Options struct {
	// Repo is the toolgate checkout the binaries are built from.
	Repo string
	// Out is the OCI image layout written.
	Out string
	// Tag names the images (toolgate/NAME:TAG).
	Tag string
	// Cache is where .deb files are downloaded to (each removed once
	// unpacked); empty: a temporary directory.
	Cache string
	// Epoch is the time stamped on every file and the images: the
	// commit's, so two builds of one commit are the same.
	Epoch time.Time
	Log   io.Writer
}

func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Closure is pkgs and every package they depend on (Depends, Pre-Depends),
// as apt-cache resolves them, without the alternatives notInstalled lists.
func Closure(ctx context.Context, pkgs []string) ([]string, error) {
	args := append([]string{"depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
		"--no-breaks", "--no-replaces", "--no-enhances"}, pkgs...)
	out, err := run(ctx, "", nil, "apt-cache", args...)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if l == "" || l[0] == ' ' || l[0] == '<' || notInstalled[l] {
			continue
		}
		seen[l] = true
	}
	var list []string
	for p := range seen {
		list = append(list, p)
	}
	sort.Strings(list)
	return list, nil
}

// Rootfs downloads pkgs' closure into a directory under cache and unpacks
// it into dir. No
// maintainer script runs; what they would have made that matters here
// (the CA bundle) is made by hand.
func Rootfs(ctx context.Context, pkgs []string, cache, dir string) ([]string, error) {
	list, err := Closure(ctx, pkgs)
	if err != nil {
		return nil, err
	}
	// A directory of this base's own: only its packages are unpacked.
	dl, err := os.MkdirTemp(cache, "debs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dl)
	if _, err := run(ctx, dl, nil, "apt-get", append([]string{"download", "-qq"}, list...)...); err != nil {
		return nil, err
	}
	debs, err := filepath.Glob(filepath.Join(dl, "*.deb"))
	if err != nil {
		return nil, err
	}
	for _, d := range debs {
		if _, err := run(ctx, "", nil, "dpkg-deb", "-x", d, dir); err != nil {
			return nil, err
		}
	}
	if err := trim(dir); err != nil {
		return nil, err
	}
	return list, caBundle(dir)
}

// trim removes what a container never reads: manuals, info pages,
// translations and documentation, keeping each package's copyright file.
func trim(root string) error {
	for _, d := range []string{"usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"} {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			return err
		}
	}
	docs := filepath.Join(root, "usr/share/doc")
	entries, err := os.ReadDir(docs)
	if err != nil {
		return nil // no documentation at all
	}
	for _, e := range entries {
		pkg := filepath.Join(docs, e.Name())
		inner, err := os.ReadDir(pkg)
		if err != nil {
			continue // a symlink to another package's directory
		}
		for _, f := range inner {
			if f.Name() != "copyright" {
				if err := os.RemoveAll(filepath.Join(pkg, f.Name())); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// caBundle concatenates the certificates ca-certificates ships into the
// bundle its postinst (update-ca-certificates) would write.
func caBundle(root string) error {
	var bundle bytes.Buffer
	src := filepath.Join(root, "usr/share/ca-certificates")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".crt") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		bundle.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			bundle.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	if bundle.Len() == 0 {
		return fmt.Errorf("CA bundle: no certificate under %s", src)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"), bundle.Bytes(), 0o644)
}

// Binaries builds the commands static for linux/GOARCH into dir, stamped
// with the checkout's commit.
func Binaries(ctx context.Context, repo, dir string, names ...string) error {
	args := []string{"build", "-trimpath", "-buildvcs=auto", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	_, err := run(ctx, repo, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH}, "go", args...)
	return err
}

// appFiles is the layer every image adds: the binary, the users, and the
// state directory (and workspace) owned by the user.
func appFiles(dir, bin string, img Image) error {
	files := map[string]string{
		"etc/passwd":        fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\n%s:x:%d:%d:toolgate:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", User, UID, UID, StateDir),
		"etc/group":         fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", User, UID),
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, d := range append([]string{"tmp", "usr/local/bin"}, trimSlash(img.Volumes)...) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, name := range append([]string{img.Name}, img.Also...) {
		b, err := os.ReadFile(filepath.Join(bin, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "usr/local/bin", name), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func trimSlash(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strings.TrimPrefix(s, "/")
	}
	return out
}

// layer tars dir: every file owned by root but the volumes (the user's),
// /tmp world-writable and sticky, every time epoch.
func layer(dir string, owned []string, epoch time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
		for _, o := range owned {
			if rel == o {
				h.Uid, h.Gid, h.Uname, h.Gname = UID, UID, User, User
			}
		}
		if rel == "tmp" {
			h.Mode = 0o1777
		}
		h.ModTime, h.AccessTime, h.ChangeTime = epoch, time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Build builds the images into o.Out and returns them by name.
func Build(ctx context.Context, o Options) (map[string]v1.Image, error) {
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	work, err := os.MkdirTemp("", "toolgate-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	cache := o.Cache
	if cache == "" {
		cache = filepath.Join(work, "debs")
	}
	bin := filepath.Join(work, "bin")
	for _, d := range []string{cache, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, img := range Images {
		for _, n := range append([]string{img.Name}, img.Also...) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	logf("building %s (CGO_ENABLED=0, linux/%s)", strings.Join(names, ", "), runtime.GOARCH)
	if err := Binaries(ctx, o.Repo, bin, names...); err != nil {
		return nil, err
	}
	bases := map[string]v1.Layer{}
	built := map[string]v1.Image{}
	idx := v1.ImageIndex(empty.Index)
	for _, img := range Images {
		pkgs := img.Debian
		if pkgs == nil {
			pkgs = []string{"ca-certificates"}
		}
		key := strings.Join(pkgs, " ")
		base, ok := bases[key]
		if !ok {
			root := filepath.Join(work, "base-"+img.Name)
			list, err := Rootfs(ctx, pkgs, cache, root)
			if err != nil {
				return nil, fmt.Errorf("%s base: %w", img.Name, err)
			}
			if img.Debian == nil {
				// The static binaries need the certificates only: keep them.
				if err := keepOnly(root, "etc/ssl/certs/ca-certificates.crt", "usr/share/doc/ca-certificates/copyright"); err != nil {
					return nil, err
				}
			}
			logf("%s base: %d Debian packages", img.Name, len(list))
			if base, err = layer(root, nil, o.Epoch); err != nil {
				return nil, err
			}
			bases[key] = base
		}
		app := filepath.Join(work, "app-"+img.Name)
		if err := appFiles(app, bin, img); err != nil {
			return nil, err
		}
		top, err := layer(app, trimSlash(img.Volumes), o.Epoch)
		if err != nil {
			return nil, err
		}
		i, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, top)
		if err != nil {
			return nil, err
		}
		i = mutate.ConfigMediaType(i, types.OCIConfigJSON)
		cf, err := i.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Created = "linux", runtime.GOARCH, v1.Time{Time: o.Epoch}
		cf.Config.User = fmt.Sprintf("%d:%d", UID, UID)
		cf.Config.Entrypoint = []string{"/usr/local/bin/" + img.Name}
		cf.Config.Cmd = img.Cmd
		cf.Config.WorkingDir = StateDir
		if img.Name == "worker" {
			cf.Config.WorkingDir = Work
		}
		cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + StateDir, "TOOLGATE_STATE_DIR=" + StateDir,
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
		cf.Config.Volumes = map[string]struct{}{}
		for _, v := range img.Volumes {
			cf.Config.Volumes[v] = struct{}{}
		}
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range img.Ports {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
		if img.Healthcheck != nil {
			cf.Config.Healthcheck = &v1.HealthConfig{Test: img.Healthcheck, Interval: 30 * time.Second,
				Timeout: 5 * time.Second, StartPeriod: 60 * time.Second, Retries: 3}
		}
		cf.Config.Labels = map[string]string{
			"org.opencontainers.image.title":   "toolgate " + img.Name,
			"org.opencontainers.image.source":  "https://github.com/toolgate/toolgate",
			"org.opencontainers.image.version": o.Tag,
		}
		if i, err = mutate.ConfigFile(i, cf); err != nil {
			return nil, err
		}
		built[img.Name] = i
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: i, Descriptor: v1.Descriptor{
			Annotations: map[string]string{"org.opencontainers.image.ref.name": "toolgate/" + img.Name + ":" + o.Tag}}})
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if _, err := layout.Write(o.Out, idx); err != nil {
		return nil, err
	}
	logf("wrote %s", o.Out)
	return built, nil
}

// keepOnly removes every file under root but keep.
func keepOnly(root string, keep ...string) error {
	tmp := root + ".keep"
	for _, k := range keep {
		if err := os.MkdirAll(filepath.Join(tmp, filepath.Dir(k)), 0o755); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(root, k), filepath.Join(tmp, k)); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	return os.Rename(tmp, root)
}
