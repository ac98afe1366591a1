package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"golang.org/x/crypto/ssh"

	"github.com/toolgate/toolgate/deploy/check/internal/need"
)

// TestSnapshotRelease builds a snapshot release for every platform and
// checks it as a downloader would: SHA256SUMS matches every file, each
// archive holds the three commands for its platform, each SBOM is valid
// CycloneDX naming the commands and the modules linked in (NATS among
// them).
func TestSnapshotRelease(t *testing.T) {
	sshKeygen := need.Program(t, "ssh-keygen", "openssh-client")
	out := filepath.Join(t.TempDir(), "dist")
	key, allowed := throwawayKey(t)
	start := time.Now()
	arts, err := Build(context.Background(), Options{Repo: "../../..", Out: out, Version: "0.0.0-SNAPSHOT-test",
		Epoch: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Log: testLog{t}, SigningKey: key, AllowedSigners: allowed})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %s", time.Since(start).Round(time.Second))
	if len(arts) != 2*len(Platforms)+3 || arts[len(arts)-2].Name != "SHA256SUMS" || arts[len(arts)-1].Name != "SHA256SUMS.sig" {
		t.Fatalf("artefacts %v", arts)
	}
	verifySignature(t, sshKeygen, out, allowed)
	// SHA256SUMS, as sha256sum -c reads it.
	f, err := os.Open(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: SHA256SUMS says %s", name, sum)
		}
	}
	if n != 2*len(Platforms)+1 {
		t.Errorf("SHA256SUMS lists %d files", n)
	}
	for _, p := range Platforms {
		base := "toolgate_0.0.0-SNAPSHOT-test_" + p.String()
		dir := filepath.Join(t.TempDir(), p.String())
		names := untar(t, filepath.Join(out, base+".tar.gz"), dir)
		for _, c := range append([]string{"LICENSE"}, Commands...) {
			if !slices.Contains(names, base+"/"+c) {
				t.Errorf("%s.tar.gz lacks %s (has %v)", base, c, names)
			}
		}
		checkSBOM(t, filepath.Join(out, base+".cdx.json"), filepath.Join(dir, base))
	}
	checkProvenance(t, out, "toolgate_0.0.0-SNAPSHOT-test.intoto.json", len(Platforms))
}

// throwawayKey makes an ed25519 key for a test's release (OpenSSH PEM)
// and an allowed_signers file listing it.
func throwawayKey(t *testing.T) (pemKey []byte, allowed string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test release key")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(pem.EncodeToMemory(block))
	if err != nil {
		t.Fatal(err)
	}
	allowed = filepath.Join(t.TempDir(), "allowed_signers")
	line := "release@toolgate namespaces=\"" + Namespace + "\" " + s.PublicKey() + "\n"
	if err := os.WriteFile(allowed, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), allowed
}

// verifySignature checks SHA256SUMS.sig with OpenSSH, as the README tells
// a downloader to, and that a changed SHA256SUMS no longer verifies.
func verifySignature(t *testing.T, sshKeygen, out, allowed string) {
	t.Helper()
	verify := func(sums []byte) ([]byte, error) {
		cmd := exec.Command(sshKeygen, "-Y", "verify", "-f", allowed, "-I", "release@toolgate", "-n", Namespace,
			"-s", filepath.Join(out, "SHA256SUMS.sig"))
		cmd.Stdin = bytes.NewReader(sums)
		return cmd.CombinedOutput()
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := verify(sums); err != nil {
		t.Fatalf("ssh-keygen -Y verify of SHA256SUMS: %v\n%s", err, b)
	}
	tampered := bytes.Replace(sums, []byte("  "), []byte("  x"), 1)
	if b, err := verify(tampered); err == nil {
		t.Fatalf("a changed SHA256SUMS verified:\n%s", b)
	}
}

// checkProvenance: the in-toto statement names every archive with its
// SHA-256, as SLSA provenance of the source commit.
func checkProvenance(t *testing.T, out, name string, archives int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, name))
	if err != nil {
		t.Fatal(err)
	}
	var st statement
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if st.Type != StatementType || st.PredicateType != PredicateType || len(st.Subject) != archives {
		t.Fatalf("%s: type %q, predicate %q, %d subjects", name, st.Type, st.PredicateType, len(st.Subject))
	}
	for _, sub := range st.Subject {
		sum, err := sha256File(filepath.Join(out, sub.Name))
		if err != nil || sub.Digest["sha256"] != sum || !strings.HasSuffix(sub.Name, ".tar.gz") {
			t.Errorf("%s: subject %s digest %v, the file's %s (%v)", name, sub.Name, sub.Digest, sum, err)
		}
	}
	deps := st.Predicate.BuildDefinition.ResolvedDependencies
	if len(deps) != 1 || len(deps[0].Digest["gitCommit"]) != 40 || st.Predicate.RunDetails.Builder.ID == "" {
		t.Errorf("%s: source %+v, builder %q", name, deps, st.Predicate.RunDetails.Builder.ID)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func untar(t *testing.T, archive, dir string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || !h.ModTime.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("%s: uid %d, time %v", h.Name, h.Uid, h.ModTime)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, os.FileMode(h.Mode&0o755)); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

func checkSBOM(t *testing.T, path, bins string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Components == nil || bom.Metadata == nil {
		t.Fatalf("%s: format %q, components %v", path, bom.BOMFormat, bom.Components != nil)
	}
	if ts, err := time.Parse(time.RFC3339, bom.Metadata.Timestamp); err != nil || ts.IsZero() {
		t.Errorf("%s: timestamp %q: %v", path, bom.Metadata.Timestamp, err)
	}
	if tc := bom.Metadata.Tools; tc == nil || tc.Components == nil || len(*tc.Components) == 0 || (*tc.Components)[0].Name == "" {
		t.Errorf("%s: no tool entry", path)
	}
	var apps, nats int
	refs := map[string]bool{}
	for _, c := range *bom.Components {
		refs[c.BOMRef] = true
		if c.Type == cdx.ComponentTypeApplication {
			apps++
			// The binary's own SHA-256, as shipped in the archive.
			sum, err := sha256File(filepath.Join(bins, c.Name))
			if err != nil || c.Hashes == nil || (*c.Hashes)[0].Value != sum {
				t.Errorf("%s: %s's hash %v, the archive's binary's %s (%v)", path, c.Name, c.Hashes, sum, err)
			}
		}
		if strings.HasPrefix(c.PackageURL, "pkg:golang/github.com/nats-io/nats.go@v") && c.Hashes != nil && len((*c.Hashes)[0].Value) == 64 {
			nats++
		}
	}
	if apps != len(Commands) || nats != 1 {
		t.Errorf("%s: %d applications, nats.go listed with its hash %d times", path, apps, nats)
	}
	// The dependency graph: the release on its commands, the worker on
	// nats.go, every reference a component.
	if bom.Dependencies == nil {
		t.Fatalf("%s: no dependency graph", path)
	}
	edges := map[string][]string{}
	for _, d := range *bom.Dependencies {
		if d.Ref != bom.Metadata.Component.BOMRef && !refs[d.Ref] {
			t.Errorf("%s: dependency of unknown %s", path, d.Ref)
		}
		if d.Dependencies != nil {
			edges[d.Ref] = *d.Dependencies
		}
	}
	if len(edges[bom.Metadata.Component.BOMRef]) != len(Commands) {
		t.Errorf("%s: the release depends on %v", path, edges[bom.Metadata.Component.BOMRef])
	}
	var workerOnNATS bool
	for ref, on := range edges {
		if strings.Contains(ref, "/cmd/worker@") {
			workerOnNATS = slices.ContainsFunc(on, func(s string) bool { return strings.Contains(s, "nats-io/nats.go@") })
		}
	}
	if !workerOnNATS {
		t.Errorf("%s: the worker does not depend on nats.go in the graph", path)
	}
}
