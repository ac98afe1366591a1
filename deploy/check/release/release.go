// Package release builds a toolgate release the way a release pipeline
// does, without goreleaser: the commands cross-compiled for every
// platform in Platforms (static, -trimpath, stamped with the commit), one
// .tar.gz per platform with LICENSE, a CycloneDX SBOM per platform read
// from the binaries' own build information (the modules linked in, with
// versions and checksums, their dependency graph, the binaries' own
// SHA-256), an in-toto statement of SLSA provenance for the archives, and
// SHA256SUMS over everything, signed with an ed25519 key as ssh-keygen -Y
// sign signs (SHA256SUMS.sig; see Sign).
//
// A release of a tag (Version v1.2.3) is built only from a clean checkout
// of that tag, and every binary must report it (the go command stamps the
// tag since Go 1.24): anything else is refused, as is a tagged release
// without a signing key.
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
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	// Platforms are the targets; nil: Platforms.
	Platforms []Platform
	// SigningKey is the ed25519 private key (OpenSSH or PKCS#8 PEM) that
	// signs SHA256SUMS; empty: unsigned, refused for a tagged release.
	SigningKey []byte
	// AllowedSigners, when set, is an ssh allowed_signers file the
	// signing key must be listed in (deploy/release/allowed_signers).
	AllowedSigners string
}

// Tagged reports whether version names a release of a tag (v1.2.3,
// v1.2.3-rc.1) rather than a snapshot.
func Tagged(version string) bool { return tagRE.MatchString(version) }

var tagRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`)

// ErrVersion reports a release whose version the checkout or the binaries
// do not bear out.
var ErrVersion = errors.New("release version mismatch")

// checkTag refuses to release version unless repo's HEAD is that tag and
// its work tree is clean (the binaries' stamp would say +dirty).
func checkTag(ctx context.Context, repo, version string) error {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "tag", "--points-at", "HEAD").Output()
	if err != nil {
		return fmt.Errorf("%w: %s: git tag --points-at HEAD: %v", ErrVersion, version, err)
	}
	if !slices.Contains(strings.Fields(string(out)), version) {
		return fmt.Errorf("%w: the checkout's HEAD is not tagged %s (its tags: %q): check out the tag to release it",
			ErrVersion, version, strings.Join(strings.Fields(string(out)), " "))
	}
	if st, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err != nil || len(st) > 0 {
		return fmt.Errorf("%w: %s: the work tree has changes (%v): release a clean checkout of the tag\n%s", ErrVersion, version, err, st)
	}
	return nil
}

// Artefact is one file of a release.
type Artefact struct {
	Name   string
	SHA256 string
}

// Build builds the release into o.Out and returns its files, SHA256SUMS
// last.
func Build(ctx context.Context, o Options) ([]Artefact, error) {
	platforms := o.Platforms
	if platforms == nil {
		platforms = Platforms
	}
	tagged := Tagged(o.Version)
	var signer *Signer
	if len(o.SigningKey) > 0 {
		var err error
		if signer, err = NewSigner(o.SigningKey); err != nil {
			return nil, err
		}
		if o.AllowedSigners != "" {
			if err := signer.ListedIn(o.AllowedSigners); err != nil {
				return nil, err
			}
		}
	} else if tagged {
		return nil, fmt.Errorf("release %s: no signing key: a tagged release's SHA256SUMS is signed (--signing-key, or TOOLGATE_RELEASE_SIGNING_KEY)", o.Version)
	}
	if tagged {
		if err := checkTag(ctx, o.Repo, o.Version); err != nil {
			return nil, err
		}
	}
	license, err := os.ReadFile(filepath.Join(o.Repo, "LICENSE"))
	if err != nil {
		return nil, fmt.Errorf("release: the archives carry LICENSE: %w", err)
	}
	started := time.Now().UTC()
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	var files, archives []string
	var goVersion, commit string
	for _, p := range platforms {
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
		for _, c := range Commands {
			bi, err := buildinfo.ReadFile(filepath.Join(dir, c))
			if err != nil {
				return nil, fmt.Errorf("%s for %s: build information: %w", c, p, err)
			}
			if tagged && bi.Main.Version != o.Version {
				return nil, fmt.Errorf("%w: %s for %s reports %s, not %s: build in a clone at the tag (the go command stamps the tag there; a linked checkout or -buildvcs=false gets no stamp)",
					ErrVersion, c, p, bi.Main.Version, o.Version)
			}
			goVersion = bi.GoVersion
			for _, st := range bi.Settings {
				if st.Key == "vcs.revision" {
					commit = st.Value
				}
			}
		}
		base := fmt.Sprintf("toolgate_%s_%s", strings.TrimPrefix(o.Version, "v"), p)
		archive := base + ".tar.gz"
		if err := tarball(filepath.Join(o.Out, archive), base, dir, license, o.Epoch); err != nil {
			return nil, err
		}
		sbom := base + ".cdx.json"
		if err := writeSBOM(filepath.Join(o.Out, sbom), dir, o.Version, p, o.Epoch); err != nil {
			return nil, err
		}
		files = append(files, archive, sbom)
		archives = append(archives, archive)
	}
	if commit == "" { // a linked checkout, where the go command stamps none
		if b, err := exec.CommandContext(ctx, "git", "-C", o.Repo, "rev-parse", "HEAD").Output(); err == nil {
			commit = strings.TrimSpace(string(b))
		}
	}
	prov := fmt.Sprintf("toolgate_%s.intoto.json", strings.TrimPrefix(o.Version, "v"))
	if err := writeProvenance(filepath.Join(o.Out, prov), o.Out, archives, provenanceRun{
		version: o.Version, platforms: platforms, goVersion: goVersion, commit: commit, started: started}); err != nil {
		return nil, err
	}
	files = append(files, prov)
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
	arts = append(arts, Artefact{"SHA256SUMS", sum})
	if signer != nil {
		if err := os.WriteFile(filepath.Join(o.Out, "SHA256SUMS.sig"), signer.Sign(sums.Bytes()), 0o644); err != nil {
			return nil, err
		}
		sum, _ := sha256File(filepath.Join(o.Out, "SHA256SUMS.sig"))
		arts = append(arts, Artefact{"SHA256SUMS.sig", sum})
	}
	return arts, nil
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
func tarball(path, base, dir string, license []byte, epoch time.Time) error {
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
	h := &tar.Header{Name: base + "/LICENSE", Mode: 0o644, Size: int64(len(license)), Typeflag: tar.TypeReg, ModTime: epoch, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := tw.Write(license); err != nil {
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
// command (the main module at its version, its commit, the SHA-256 of the
// binary) and every module linked into any of them, with its go.sum
// hash, from the build information the toolchain embedded; the
// dependency graph (the release on its commands, each command on the
// modules linked into it), the time (the commit's) and the tool that
// wrote it.
func writeSBOM(path, dir, version string, p Platform, epoch time.Time) error {
	bom := cdx.NewBOM()
	bom.SerialNumber = ""
	mods := map[string]cdx.Component{}
	var top []cdx.Component
	var deps []cdx.Dependency
	var goVersion string
	for _, c := range Commands {
		file := filepath.Join(dir, c)
		bi, err := buildinfo.ReadFile(file)
		if err != nil {
			return fmt.Errorf("%s: build information: %w", c, err)
		}
		sum, err := sha256File(file)
		if err != nil {
			return err
		}
		goVersion = bi.GoVersion
		props := []cdx.Property{{Name: "go:version", Value: bi.GoVersion}, {Name: "go:platform", Value: p.String()}}
		for _, s := range bi.Settings {
			if strings.HasPrefix(s.Key, "vcs.") {
				props = append(props, cdx.Property{Name: "go:" + s.Key, Value: s.Value})
			}
		}
		ref := "pkg:golang/" + bi.Main.Path + "/cmd/" + c + "@" + version
		top = append(top, cdx.Component{Type: cdx.ComponentTypeApplication, Name: c, Version: version,
			BOMRef: ref, PackageURL: "pkg:golang/" + bi.Main.Path + "@" + version,
			Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}}, Properties: &props})
		var on []string
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
			on = append(on, purl)
		}
		sort.Strings(on)
		deps = append(deps, cdx.Dependency{Ref: ref, Dependencies: &on})
	}
	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	comps := top
	for _, k := range keys {
		comps = append(comps, mods[k])
		deps = append(deps, cdx.Dependency{Ref: k}) // what a module links is not recorded: no edges
	}
	root := "pkg:golang/github.com/toolgate/toolgate@" + version
	var cmds []string
	for _, c := range top {
		cmds = append(cmds, c.BOMRef)
	}
	deps = append([]cdx.Dependency{{Ref: root, Dependencies: &cmds}}, deps...)
	bom.Metadata = &cdx.Metadata{
		Timestamp: epoch.UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication,
			Name: "toolgate-release", Group: "github.com/toolgate/toolgate/deploy/check", Version: goVersion,
			Description: "deploy/check/cmd/release: reads the binaries' Go build information"}}},
		Component: &cdx.Component{Type: cdx.ComponentTypeApplication, Name: "toolgate", Version: version, BOMRef: root},
	}
	bom.Components = &comps
	bom.Dependencies = &deps
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
