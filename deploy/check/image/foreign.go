package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// ForeignRootfs installs, into dir, the packages of native (a root Rootfs
// installed for this machine's architecture) built for arch (arm64), a
// machine this one cannot run programs of: their maintainer scripts
// cannot run here, so what they made in native (every file no package
// ships: the /bin/sh and alternatives links, /etc/passwd, the CA bundle,
// the dpkg diversions and alternatives) is copied, but for what depends
// on the architecture (ld.so's cache, which the loader does without); the
// dpkg database is written from arch's packages: what each installed,
// with its version and architecture, as scanners read it.
func ForeignRootfs(ctx context.Context, native, arch, cache, dir string) ([]string, error) {
	pkgs, err := readStatus(filepath.Join(native, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	var names, want []string
	for _, p := range pkgs {
		names = append(names, p["Package"])
		if p["Architecture"] == "all" {
			want = append(want, p["Package"])
		} else {
			want = append(want, p["Package"]+":"+arch)
		}
	}
	dl, err := os.MkdirTemp(cache, "debs-"+arch+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dl)
	if _, err := run(ctx, dl, nil, "apt-get", append([]string{"download", "-qq"}, want...)...); err != nil {
		return nil, fmt.Errorf("%s packages (dpkg --add-architecture %s && apt-get update makes them available): %w", arch, arch, err)
	}
	debs, err := filepath.Glob(filepath.Join(dl, "*.deb"))
	if err != nil {
		return nil, err
	}
	if len(debs) != len(want) {
		return nil, fmt.Errorf("%s packages: %d downloaded for %d wanted", arch, len(debs), len(want))
	}
	sort.Strings(debs)
	for _, d := range debs {
		if _, err := run(ctx, "", nil, "dpkg-deb", "-x", d, dir); err != nil {
			return nil, err
		}
	}
	if err := copyScriptsWork(native, dir); err != nil {
		return nil, err
	}
	if err := foreignDatabase(ctx, native, dir, debs, pkgs); err != nil {
		return nil, err
	}
	return names, trim(dir)
}

// archDependent are files maintainer scripts make that hold the native
// architecture's paths; ld.so searches the default directories without
// its cache.
var archDependent = map[string]bool{"etc/ld.so.cache": true, "var/cache/ldconfig/aux-cache": true}

// copyScriptsWork copies what native holds that no package of it ships
// (its dpkg file lists say which) and dir lacks.
func copyScriptsWork(native, dir string) error {
	owned := map[string]bool{}
	lists, err := filepath.Glob(filepath.Join(native, "var/lib/dpkg/info/*.list"))
	if err != nil {
		return err
	}
	for _, l := range lists {
		f, err := os.Open(l)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			owned[strings.TrimPrefix(sc.Text(), "/")] = true
		}
		f.Close()
	}
	return filepath.WalkDir(native, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == native {
			return err
		}
		rel, _ := filepath.Rel(native, p)
		if rel == "var/lib/dpkg/info" || rel == "var/lib/dpkg/status" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if owned[rel] || archDependent[rel] {
			return nil
		}
		dst := filepath.Join(dir, rel)
		if _, err := os.Lstat(dst); err == nil {
			return nil // arch's packages ship it
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case fi.IsDir():
			return os.MkdirAll(dst, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, fi.Mode().Perm())
		}
		return nil
	})
}

// foreignDatabase writes dir's dpkg status and file lists from the
// foreign packages debs, each installed, keeping the conffiles the native
// installation recorded.
func foreignDatabase(ctx context.Context, native, dir string, debs []string, nativePkgs []map[string]string) error {
	conffiles := map[string]string{}
	for _, p := range nativePkgs {
		conffiles[p["Package"]] = p["Conffiles"]
	}
	info := filepath.Join(dir, "var/lib/dpkg/info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		return err
	}
	var status []string
	for _, d := range debs {
		ctl, err := run(ctx, "", nil, "dpkg-deb", "-f", d)
		if err != nil {
			return err
		}
		fields := parseParagraph(string(ctl))
		name := fields["Package"]
		entry := "Package: " + name + "\nStatus: install ok installed\n"
		for _, l := range strings.SplitAfter(strings.TrimRight(string(ctl), "\n")+"\n", "\n") {
			if l != "" && !strings.HasPrefix(l, "Package: ") {
				entry += l
			}
		}
		if c := conffiles[name]; c != "" {
			entry += "Conffiles:" + c + "\n"
		}
		status = append(status, entry)
		key := name
		if fields["Multi-Arch"] == "same" {
			key += ":" + fields["Architecture"]
		}
		listing, err := run(ctx, "", nil, "dpkg-deb", "--fsys-tarfile", d)
		if err != nil {
			return err
		}
		paths, err := tarPaths(listing)
		if err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
		if err := os.WriteFile(filepath.Join(info, key+".list"), []byte(strings.Join(paths, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		tmp, err := os.MkdirTemp("", "ctl-")
		if err != nil {
			return err
		}
		if _, err := run(ctx, "", nil, "dpkg-deb", "-e", d, tmp); err != nil {
			os.RemoveAll(tmp)
			return err
		}
		entries, _ := os.ReadDir(tmp)
		for _, e := range entries {
			if e.Name() == "control" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(tmp, e.Name()))
			if err == nil {
				err = os.WriteFile(filepath.Join(info, key+"."+e.Name()), b, 0o644)
			}
			if err != nil {
				os.RemoveAll(tmp)
				return err
			}
		}
		os.RemoveAll(tmp)
	}
	sort.Strings(status)
	return os.WriteFile(filepath.Join(dir, "var/lib/dpkg/status"), []byte(strings.Join(status, "\n")), 0o644)
}

// readStatus reads a dpkg status file's paragraphs.
func readStatus(path string) ([]map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, para := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		if f := parseParagraph(para); f["Package"] != "" {
			out = append(out, f)
		}
	}
	return out, nil
}

// parseParagraph reads a deb822 paragraph; a continuation line is kept
// with its field (Conffiles' lines, each starting with a space and
// ending with a newline).
func parseParagraph(para string) map[string]string {
	f := map[string]string{}
	last := ""
	for _, l := range strings.Split(para, "\n") {
		if strings.HasPrefix(l, " ") && last != "" {
			f[last] += "\n" + l
			continue
		}
		if k, v, ok := strings.Cut(l, ":"); ok {
			last = k
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}

// hostArch is this machine's Debian and Go architecture (they agree for
// amd64 and arm64).
var hostArch = runtime.GOARCH

// tarPaths lists a package's data tarball as dpkg's .list files do:
// "/." for the root, absolute paths without a trailing slash.
func tarPaths(b []byte) ([]string, error) {
	tr := tar.NewReader(bytes.NewReader(b))
	var out []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		p := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if p == "/" {
			p = "/."
		}
		out = append(out, p)
	}
}
