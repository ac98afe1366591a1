package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// TestSnapshotRelease builds a snapshot release for every platform and
// checks it as a downloader would: SHA256SUMS matches every file, each
// archive holds the three commands for its platform, each SBOM is valid
// CycloneDX naming the commands and the modules linked in (NATS among
// them).
func TestSnapshotRelease(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dist")
	start := time.Now()
	arts, err := Build(context.Background(), Options{Repo: "../../..", Out: out, Version: "0.0.0-SNAPSHOT-test",
		Epoch: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %s", time.Since(start).Round(time.Second))
	if len(arts) != 2*len(Platforms)+1 || arts[len(arts)-1].Name != "SHA256SUMS" {
		t.Fatalf("artefacts %v", arts)
	}
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
	if n != 2*len(Platforms) {
		t.Errorf("SHA256SUMS lists %d files", n)
	}
	for _, p := range Platforms {
		base := "toolgate_0.0.0-SNAPSHOT-test_" + p.String()
		names := untar(t, filepath.Join(out, base+".tar.gz"), filepath.Join(t.TempDir(), p.String()))
		for _, c := range Commands {
			if !slices.Contains(names, base+"/"+c) {
				t.Errorf("%s.tar.gz lacks %s (has %v)", base, c, names)
			}
		}
		checkSBOM(t, filepath.Join(out, base+".cdx.json"))
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
	}
	return names
}

func checkSBOM(t *testing.T, path string) {
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
	var apps, nats int
	for _, c := range *bom.Components {
		if c.Type == cdx.ComponentTypeApplication {
			apps++
		}
		if strings.HasPrefix(c.PackageURL, "pkg:golang/github.com/nats-io/nats.go@v") && c.Hashes != nil && len((*c.Hashes)[0].Value) == 64 {
			nats++
		}
	}
	if apps != len(Commands) || nats != 1 {
		t.Errorf("%s: %d applications, nats.go listed with its hash %d times", path, apps, nats)
	}
}
