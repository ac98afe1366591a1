// Package release builds a toolgate release the way a release pipeline
// does, without goreleaser: the three commands cross-compiled for every
// platform in Platforms (static, -trimpath, stamped with the commit), one
// .tar.gz per platform, a CycloneDX SBOM per platform read from the
// binaries' own build information (the modules linked in, with versions
// and checksums), and SHA256SUMS over everything.
//
// Why not goreleaser: its module graph (cloud SDKs, signing, publishers)
// would be compiled from source in every CI run for a job that is a
// dozen lines here; this does what the release needs and CI runs it whole.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// Platform is a GOOS/GOARCH pair.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "_" + p.Arch }

// Head is the time and short hash of repo's last commit: the build's
// reproducible timestamp and a snapshot's name. Outside a git checkout it
// is the Unix epoch and "unknown".
func Head(repo string) (epoch time.Time, commit string) {
	epoch, commit = time.Unix(0, 0).UTC(), "unknown"
	b, err := exec.Command("git", "-C", repo, "log", "-1", "--format=%ct %h").Output()
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if s, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			epoch, commit = time.Unix(s, 0).UTC(), f[1]
		}
	}
	return epoch, commit
}

// Platforms are the release's targets.
var Platforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}}

// Commands are the binaries of a release (toolgate-sandbox-init is the
// worker's, for its sandbox: it looks for it beside itself).
var Commands = []string{"worker", "approver", "toolctl", "toolgate-sandbox-init"}

// Options configure a release build.
type Options struct {
	Repo    string    // the toolgate checkout
	Out     string    // directory the artefacts are written to (emptied first)
	Version string    // v1.2.3, or a snapshot name
	Epoch   time.Time // time stamped on archive entries (the commit's)
	Log     io.Writer
}

// Artefact is one file of a release.
type Artefact struct {
	Name   string
	SHA256 string
}

// Build builds the release into o.Out and returns its files, SHA256SUMS
// last.
func Build(ctx context.Context, o Options) ([]Artefact, error) {
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, p := range Platforms {
		dir, err := os.MkdirTemp("", "toolgate-release-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if o.Log != nil {
			fmt.Fprintf(o.Log, "building %s for %s\n", strings.Join(Commands, ", "), p)
		}
		args := []string{"build", "-trimpath", "-buildvcs=auto", "-o", dir + "/"}
		for _, c := range Commands {
			args = append(args, "./cmd/"+c)
		}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = o.Repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build for %s: %w\n%s", p, err, out)
		}
		base := fmt.Sprintf("toolgate_%s_%s", strings.TrimPrefix(o.Version, "v"), p)
		archive := base + ".tar.gz"
		if err := tarball(filepath.Join(o.Out, archive), base, dir, o.Epoch); err != nil {
			return nil, err
		}
		sbom := base + ".cdx.json"
		if err := writeSBOM(filepath.Join(o.Out, sbom), dir, o.Version, p); err != nil {
			return nil, err
		}
		files = append(files, archive, sbom)
	}
	sort.Strings(files)
	var sums bytes.Buffer
	var arts []Artefact
	for _, f := range files {
		sum, err := sha256File(filepath.Join(o.Out, f))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, f)
		arts = append(arts, Artefact{f, sum})
	}
	if err := os.WriteFile(filepath.Join(o.Out, "SHA256SUMS"), sums.Bytes(), 0o644); err != nil {
		return nil, err
	}
	sum, _ := sha256File(filepath.Join(o.Out, "SHA256SUMS"))
	return append(arts, Artefact{"SHA256SUMS", sum}), nil
}

func sha256File(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// tarball writes the commands under base/ in a gzip'd tar, owned by root,
// every entry stamped with epoch: a commit builds the same archive.
func tarball(path, base, dir string, epoch time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: base + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	for _, c := range Commands {
		b, err := os.ReadFile(filepath.Join(dir, c))
		if err != nil {
			return err
		}
		h := &tar.Header{Name: base + "/" + c, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

// writeSBOM describes the binaries of one platform: a component per
// command (the main module at its version, its commit) and every module
// linked into any of them, with its go.sum hash, from the build
// information the toolchain embedded.
func writeSBOM(path, dir, version string, p Platform) error {
	bom := cdx.NewBOM()
	bom.SerialNumber = ""
	mods := map[string]cdx.Component{}
	var top []cdx.Component
	for _, c := range Commands {
		bi, err := buildinfo.ReadFile(filepath.Join(dir, c))
		if err != nil {
			return fmt.Errorf("%s: build information: %w", c, err)
		}
		props := []cdx.Property{{Name: "go:version", Value: bi.GoVersion}, {Name: "go:platform", Value: p.String()}}
		for _, s := range bi.Settings {
			if strings.HasPrefix(s.Key, "vcs.") {
				props = append(props, cdx.Property{Name: "go:" + s.Key, Value: s.Value})
			}
		}
		top = append(top, cdx.Component{Type: cdx.ComponentTypeApplication, Name: c, Version: version,
			BOMRef: "pkg:golang/" + bi.Main.Path + "/cmd/" + c + "@" + version, PackageURL: "pkg:golang/" + bi.Main.Path + "@" + version,
			Properties: &props})
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			purl := "pkg:golang/" + d.Path + "@" + d.Version
			comp := cdx.Component{Type: cdx.ComponentTypeLibrary, Name: d.Path, Version: d.Version, BOMRef: purl, PackageURL: purl}
			// go.sum's h1: is a SHA-256 (of the module's file list), base64.
			if h, ok := strings.CutPrefix(d.Sum, "h1:"); ok {
				if b, err := base64.StdEncoding.DecodeString(h); err == nil {
					comp.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(b)}}
				}
			}
			mods[purl] = comp
		}
	}
	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	comps := top
	for _, k := range keys {
		comps = append(comps, mods[k])
	}
	bom.Metadata = &cdx.Metadata{Component: &cdx.Component{Type: cdx.ComponentTypeApplication, Name: "toolgate", Version: version,
		BOMRef: "pkg:golang/github.com/toolgate/toolgate@" + version}}
	bom.Components = &comps
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := cdx.NewBOMEncoder(f, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return err
	}
	return f.Close()
}
