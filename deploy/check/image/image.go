// Package image builds toolgate's container images without a Docker
// daemon or a registry: the worker's base is a Debian system installed
// the way debootstrap installs one (apt-get download; dpkg-deb -x, so
// that the root holds a working dpkg; then dpkg --install of every
// package in that root, under bwrap, so that every maintainer script
// runs: the /bin/sh link, the alternatives (awk, which), the CA bundle,
// the dpkg status database scanners read), holding bubblewrap, git,
// ripgrep, bash, dash and the userland a sandboxed command expects with
// their dependencies; the binaries are built static (CGO_ENABLED=0), and
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
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/toolgate/toolgate/deploy/check/release"
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
// ripgrep) and the shell and utilities a sandboxed command runs, with the
// essential packages no other depends on but a Debian system has: dash
// (/bin/sh, which git's wrappers and scripts run), base-passwd (the
// users maintainer scripts give files to), libc-bin (ldconfig).
var WorkerPackages = []string{"bubblewrap", "git", "ripgrep", "ca-certificates", "bash", "dash", "coreutils",
	"findutils", "grep", "sed", "diffutils", "mawk", "debianutils", "base-passwd", "libc-bin"}

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
	// Arches are the images' architectures (Debian's and Go's names:
	// amd64, arm64), this machine's first; nil: this machine's only. The
	// others' Debian packages come from apt (dpkg --add-architecture).
	Arches []string
	Log    io.Writer
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
		// name:arch lines are other architectures' packages (with
		// dpkg --add-architecture): this base is the native one.
		if l == "" || l[0] == ' ' || l[0] == '<' || notInstalled[l] || strings.Contains(l, ":") {
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

// Rootfs downloads pkgs' closure into a directory under cache and
// installs it into dir as debootstrap does: every package unpacked with
// dpkg-deb -x (which gives dir a working dpkg and shell), then installed
// again by that dpkg inside dir (Install), which runs every maintainer
// script and records the packages in dir's dpkg database.
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
	if err := Install(ctx, dir, dl); err != nil {
		return nil, err
	}
	if err := trim(dir); err != nil {
		return nil, err
	}
	return list, nil
}

// Install runs, in root (as its root directory, under bwrap), dpkg
// --install of every .deb in debs, with the dependencies ignored as
// debootstrap's second stage does (they are all there; the order is
// dpkg's). Every maintainer script runs as on a Debian machine. root must
// hold dpkg and a shell already (dpkg-deb -x of the packages); its dpkg
// database starts empty. It needs bwrap and root, or unshare (util-linux)
// and subordinate ids for the user (the scripts give files to system
// users and groups).
func Install(ctx context.Context, root, debs string) error {
	db := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers", "alternatives"} {
		if err := os.MkdirAll(filepath.Join(db, d), 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{"status", "available", "diversions", "statoverride"} {
		if err := os.WriteFile(filepath.Join(db, f), nil, 0o644); err != nil {
			return err
		}
	}
	// base-passwd's preinst makes /etc/passwd and /etc/group from its
	// masters only where none is: dpkg-deb -x left none, as on a new system.
	for _, f := range []string{"etc/passwd", "etc/group", "etc/shadow", "etc/gshadow"} {
		if err := os.Remove(filepath.Join(root, f)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	var argv []string
	if os.Geteuid() != 0 {
		argv = []string{"unshare", "--user", "--map-root-user", "--map-users=auto", "--map-groups=auto"}
	}
	argv = append(argv, "bwrap", "--bind", root, "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
		"--ro-bind", debs, "/debs", "--unshare-pid", "--unshare-net", "--die-with-parent", "--clearenv",
		"--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--setenv", "DEBIAN_FRONTEND", "noninteractive", "--setenv", "LANG", "C.UTF-8",
		"/bin/sh", "-c", "dpkg --force-depends --install /debs/*.deb")
	if out, err := run(ctx, "", nil, argv[0], argv[1:]...); err != nil {
		return fmt.Errorf("installing the packages in the image's root: %w\n%s", err, lastLines(out, 30))
	}
	// The logs of the installation carry the build's clock: a commit
	// builds the same image.
	for _, f := range []string{"var/log/dpkg.log", "var/log/alternatives.log", "var/cache/debconf/config.dat-old",
		"var/cache/debconf/templates.dat-old", "var/lib/dpkg/status-old", "var/lib/dpkg/diversions-old"} {
		if err := os.Remove(filepath.Join(root, f)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); err != nil {
		return fmt.Errorf("installing the packages in the image's root: no CA bundle: %w", err)
	}
	return nil
}

func lastLines(b []byte, n int) string {
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
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

// Binaries builds the commands static for linux/arch into dir, stamped
// with the checkout's commit.
func Binaries(ctx context.Context, repo, dir, arch string, names ...string) error {
	args := []string{"build", "-trimpath", "-buildvcs=auto", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	_, err := run(ctx, repo, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}, "go", args...)
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
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for _, img := range Images {
		for _, n := range append([]string{img.Name}, img.Also...) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	arches := o.Arches
	if arches == nil {
		arches = []string{hostArch}
	}
	if arches[0] != hostArch {
		return nil, fmt.Errorf("architectures %v: this machine's, %s, comes first (the others' bases copy its maintainer scripts' work)", arches, hostArch)
	}
	perName := map[string][]v1.Image{}
	built := map[string]v1.Image{}
	native := "" // the host architecture's installed Debian base
	for _, arch := range arches {
		bin := filepath.Join(work, "bin-"+arch)
		if err := os.MkdirAll(bin, 0o755); err != nil {
			return nil, err
		}
		logf("building %s (CGO_ENABLED=0, linux/%s)", strings.Join(names, ", "), arch)
		if err := Binaries(ctx, o.Repo, bin, arch, names...); err != nil {
			return nil, err
		}
		revision, err := checkVersion(bin, names, o.Tag)
		if err != nil {
			return nil, err
		}
		bases := map[string]v1.Layer{}
		full := "" // the root of the Debian base installed last
		for _, img := range Images {
			key := strings.Join(img.Debian, " ")
			base, ok := bases[key]
			if !ok {
				root := filepath.Join(work, arch, "base-"+img.Name)
				if err := os.MkdirAll(root, 0o755); err != nil {
					return nil, err
				}
				if img.Debian != nil {
					var list []string
					var err error
					if arch == hostArch {
						list, err = Rootfs(ctx, img.Debian, cache, root)
						native = root
					} else {
						list, err = ForeignRootfs(ctx, native, arch, cache, root)
					}
					if err != nil {
						return nil, fmt.Errorf("%s base for %s: %w", img.Name, arch, err)
					}
					logf("%s base for %s: %d Debian packages", img.Name, arch, len(list))
					full = root
				} else {
					// The static binaries need the certificates only: those of
					// a Debian base installed already, with their package's
					// entry in the dpkg database.
					if full == "" {
						return nil, fmt.Errorf("%s base: no Debian base to take the certificates from (build one first)", img.Name)
					}
					if err := certsOnly(full, root); err != nil {
						return nil, fmt.Errorf("%s base: %w", img.Name, err)
					}
				}
				if base, err = layer(root, nil, o.Epoch); err != nil {
					return nil, err
				}
				bases[key] = base
			}
			app := filepath.Join(work, arch, "app-"+img.Name)
			if err := appFiles(app, bin, img); err != nil {
				return nil, err
			}
			i, err := imageOf(img, arch, base, app, revision, o)
			if err != nil {
				return nil, err
			}
			if arch == hostArch {
				built[img.Name] = i
			}
			perName[img.Name] = append(perName[img.Name], i)
		}
	}
	// One index per image, a manifest per platform in it: what registries
	// serve for a multi-architecture tag (skopeo copy --all).
	idx := v1.ImageIndex(empty.Index)
	for _, img := range Images {
		inner := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for n, i := range perName[img.Name] {
			inner = mutate.AppendManifests(inner, mutate.IndexAddendum{Add: i, Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "linux", Architecture: arches[n]}}})
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: inner, Descriptor: v1.Descriptor{
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

// imageOf is img for arch: base, then the app layer of directory app,
// and its configuration.
func imageOf(img Image, arch string, base v1.Layer, app, revision string, o Options) (v1.Image, error) {
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
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: o.Epoch}
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
	if revision != "" {
		cf.Config.Labels["org.opencontainers.image.revision"] = revision
	}
	if i, err = mutate.ConfigFile(i, cf); err != nil {
		return nil, err
	}
	return i, nil
}

// ErrVersion reports images tagged with a release version their binaries
// do not report.
var ErrVersion = errors.New("image tag and binaries' version differ")

// checkVersion refuses a release tag (v1.2.3) the binaries in bin do not
// report as their version (the go command stamps the tag in a clean clone
// at it), and returns the commit they were built from, if stamped.
func checkVersion(bin string, names []string, tag string) (string, error) {
	revision := ""
	for _, n := range names {
		bi, err := buildinfo.ReadFile(filepath.Join(bin, n))
		if err != nil {
			return "", fmt.Errorf("%s: build information: %w", n, err)
		}
		if release.Tagged(tag) && bi.Main.Version != tag {
			return "", fmt.Errorf("%w: tag %s, but %s reports %s: build the images in a clean clone checked out at the tag",
				ErrVersion, tag, n, bi.Main.Version)
		}
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				revision = st.Value
			}
		}
	}
	return revision, nil
}

// certsOnly copies into dst the CA bundle, its package's copyright and
// its entry in the dpkg database of the Debian root src.
func certsOnly(src, dst string) error {
	for _, f := range []string{"etc/ssl/certs/ca-certificates.crt", "usr/share/doc/ca-certificates/copyright"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			return err
		}
	}
	status, err := os.ReadFile(filepath.Join(src, "var/lib/dpkg/status"))
	if err != nil {
		return err
	}
	var keep []string
	for _, para := range strings.Split(string(status), "\n\n") {
		if strings.HasPrefix(para, "Package: ca-certificates\n") {
			keep = append(keep, strings.TrimSpace(para)+"\n")
		}
	}
	if len(keep) != 1 {
		return fmt.Errorf("%d entries for ca-certificates in the dpkg database", len(keep))
	}
	if err := os.MkdirAll(filepath.Join(dst, "var/lib/dpkg"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "var/lib/dpkg/status"), []byte(keep[0]), 0o644)
}
