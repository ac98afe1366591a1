package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// accessPolicy lets every shell command run and denies reading *.pem and
// a secrets directory, and lets shell commands read /opt/data.
const accessPolicy = `version: 1
default: ask
tools:
  read: { action: allow, constraints: { denied_paths: ["**/*.pem", "secrets"] } }
  write: allow
  bash: { action: allow, constraints: { allowed_paths: ["/opt/data"] } }
`

func TestAccessOfAShellCommand(t *testing.T) {
	ws := t.TempDir()
	if r, err := filepath.EvalSymlinks(ws); err == nil {
		ws = r
	}
	for _, f := range []string{"notes.txt", "sub/a.txt"} {
		writeAccessFile(t, filepath.Join(ws, f))
	}
	g := NewGate(mustParse(t, accessPolicy))
	for _, tt := range []struct {
		command string
		write   WriteScope
		files   []string
	}{
		{"cat notes.txt", WriteNone, nil},
		{"grep -r x . | head -n 3", WriteNone, nil},
		{"cat notes.txt > out.txt", WriteNamed, []string{"out.txt"}},
		{"cat notes.txt >> sub/log.txt; wc -l notes.txt > sub/n.txt", WriteNamed, []string{"sub/log.txt", "sub/n.txt"}},
		{"cat notes.txt 2>/dev/null", WriteNone, nil},
		{"cp notes.txt copy.txt", WriteWorkspace, nil},
		{"cat notes.txt > out.txt; rm notes.txt", WriteWorkspace, nil},
	} {
		t.Run(tt.command, func(t *testing.T) {
			d := g.Evaluate(context.Background(), call{tool: "bash", args: sh(tt.command)}.request(ws))
			if d.Action != Allow || d.Access == nil {
				t.Fatalf("decision %+v, want an allow with an access", d)
			}
			a := d.Access
			if a.Write != tt.write {
				t.Errorf("write %s, want %s", a.Write, tt.write)
			}
			var want []string
			for _, f := range tt.files {
				want = append(want, filepath.Join(ws, f))
			}
			if !slices.Equal(a.WriteFiles, want) && tt.write == WriteNamed {
				t.Errorf("write files %q, want %q", a.WriteFiles, want)
			}
			if !slices.Contains(a.Reads, "/opt/data") || slices.Contains(a.Reads, ws) {
				t.Errorf("reads %q, want /opt/data and not the workspace", a.Reads)
			}
			if a.WorkspaceExec {
				t.Error("workspace programs may run, without exec.security: full")
			}
		})
	}
	if d := g.Evaluate(context.Background(), call{tool: "bash", args: sh("cat key.pem")}.request(ws)); d.Access != nil {
		t.Errorf("a denied call carries an access: %+v", d)
	}
}

func TestAccessScan(t *testing.T) {
	ws := t.TempDir()
	if r, err := filepath.EvalSymlinks(ws); err == nil {
		ws = r
	}
	for _, f := range []string{"notes.txt", "key.pem", "sub/deep.PEM", "secrets/token", ".git/config", ".git/hooks/pre-commit",
		".git/objects/ab/cdef", ".git/HEAD", "sub/.gitattributes", ".npmrc", "mod/.git", "sub/ok.txt"} {
		writeAccessFile(t, filepath.Join(ws, f))
	}
	if err := os.Symlink("key.pem", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	g := NewGate(mustParse(t, accessPolicy))
	d := g.Evaluate(context.Background(), call{tool: "bash", args: sh("cat notes.txt")}.request(ws))
	s, err := d.Access.Scan(ws)
	if err != nil {
		t.Fatal(err)
	}
	abs := func(rel ...string) []string {
		var out []string
		for _, r := range rel {
			out = append(out, filepath.Join(ws, r))
		}
		slices.Sort(out)
		return out
	}
	slices.Sort(s.Masked)
	slices.Sort(s.Protected)
	if want := abs("key.pem", "secrets", "sub/deep.PEM"); !slices.Equal(s.Masked, want) {
		t.Errorf("masked %q, want %q", s.Masked, want)
	}
	if want := abs(".git/config", ".git/hooks", ".npmrc", "mod/.git", "sub/.gitattributes"); !slices.Equal(s.Protected, want) {
		t.Errorf("protected %q, want %q", s.Protected, want)
	}
	// No gate: nothing masked, the protected files found all the same.
	var none *Access
	s, err = none.Scan(ws)
	if err != nil || len(s.Masked) != 0 || len(s.Protected) != 5 {
		t.Errorf("a nil access's scan: %+v, %v", s, err)
	}
}

func TestAccessScanBound(t *testing.T) {
	defer func(old int) { maxScan = old }(maxScan)
	maxScan = 100
	ws := t.TempDir()
	for i := 0; i < 60; i++ {
		writeAccessFile(t, filepath.Join(ws, "d"+strconv.Itoa(i%3), "f"+strconv.Itoa(i)))
	}
	var none *Access
	if _, err := none.Scan(ws); err != nil {
		t.Fatalf("scan under the bound: %v", err)
	}
	for i := 60; i < 100; i++ {
		writeAccessFile(t, filepath.Join(ws, "d"+strconv.Itoa(i%3), "f"+strconv.Itoa(i)))
	}
	if _, err := none.Scan(ws); !errors.Is(err, ErrScanBound) {
		t.Fatalf("scan of a workspace over the bound: %v, want ErrScanBound", err)
	}
}

// TestAccessScanSeesNewNames: a directory's names are kept between scans,
// and a file created in it afterwards is found by the next scan.
func TestAccessScanSeesNewNames(t *testing.T) {
	defer func(old time.Duration) { listings.recent = old }(listings.recent)
	listings.recent = 0 // keep every listing, however fresh
	ws := t.TempDir()
	if r, err := filepath.EvalSymlinks(ws); err == nil {
		ws = r
	}
	writeAccessFile(t, filepath.Join(ws, "sub", "a.txt"))
	g := NewGate(mustParse(t, accessPolicy))
	d := g.Evaluate(context.Background(), call{tool: "bash", args: sh("cat sub/a.txt")}.request(ws))
	for i, want := range [][]string{nil, {filepath.Join(ws, "sub", "new.pem")}} {
		s, err := d.Access.Scan(ws)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Masked, want) {
			t.Fatalf("scan %d: masked %q, want %q", i, s.Masked, want)
		}
		// Past the file system clock's tick, so that the directory's
		// times change.
		time.Sleep(50 * time.Millisecond)
		writeAccessFile(t, filepath.Join(ws, "sub", "new.pem"))
	}
}

func writeAccessFile(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAccessScan is the per-call walk of a workspace for its denied
// and protected files (Access.Scan), in workspaces of 1,000 and 10,000
// files (100 per directory, a repository with 2,000 objects beside),
// under a policy that denies *.pem and secrets: with every directory
// read (cold) and with their names kept from the last scan (kept).
func BenchmarkAccessScan(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ws := b.TempDir()
			for i := 0; i < n; i++ {
				p := filepath.Join(ws, "d"+strconv.Itoa(i/100), "f"+strconv.Itoa(i)+".txt")
				if i%500 == 0 {
					p = strings.TrimSuffix(p, ".txt") + ".pem"
				}
				benchFile(b, p)
			}
			for i := 0; i < 2000; i++ {
				benchFile(b, filepath.Join(ws, ".git", "objects", strconv.Itoa(i%256), strconv.Itoa(i)))
			}
			benchFile(b, filepath.Join(ws, ".git", "config"))
			p, _, err := Parse([]byte(accessPolicy), "bench")
			if err != nil {
				b.Fatal(err)
			}
			d := NewGate(p).Evaluate(context.Background(), Request{Tool: "bash", Known: true, Kind: KindExecute,
				Arguments: map[string]any{"command": "cat d0/f1.txt"}, Workspace: ws})
			if d.Access == nil {
				b.Fatalf("no access: %+v", d)
			}
			// A workspace not changed in the last moments, as between an
			// agent's calls: its directories' names may be kept.
			time.Sleep(listings.recent + 100*time.Millisecond)
			for _, kept := range []bool{false, true} {
				name := "cold"
				if kept {
					name = "kept"
				}
				b.Run(name, func(b *testing.B) {
					for b.Loop() {
						if !kept {
							listings.mu.Lock()
							listings.m = nil
							listings.mu.Unlock()
						}
						if _, err := d.Access.Scan(ws); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

func benchFile(b *testing.B, p string) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		b.Fatal(err)
	}
}
