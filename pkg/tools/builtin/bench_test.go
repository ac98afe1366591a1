package builtin

import (
	"os/exec"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// BenchmarkSearchGoSource compares grep and glob with ripgrep over Go's
// source tree in the same run:
//
//	go test -run '^$' -bench SearchGoSource -benchtime 20x ./pkg/tools/builtin
func BenchmarkSearchGoSource(b *testing.B) {
	rg := testenv.LookPath(b, "rg", "ripgrep")
	src := goSrc(b)
	e := newEnv(b, Config{Workspace: src, MaxReadSize: 1 << 30})
	for _, pc := range []struct{ name, pattern string }{
		{"literal", "func main"},
		{"regex", `errors\.(Is|As)\(`},
		{"icase", "(?i)copyright 2011"},
	} {
		b.Run("grep/"+pc.name, func(b *testing.B) {
			for b.Loop() {
				e.ok(b, "grep", map[string]any{"pattern": pc.pattern})
			}
		})
		b.Run("rg/"+pc.name, func(b *testing.B) {
			for b.Loop() {
				runRg(b, rg, src, "--files-with-matches", "-e", pc.pattern)
			}
		})
	}
	b.Run("glob/all-go", func(b *testing.B) {
		for b.Loop() {
			e.ok(b, "glob", map[string]any{"pattern": "**/*.go"})
		}
	})
	b.Run("rg/files", func(b *testing.B) {
		for b.Loop() {
			runRg(b, rg, src, "--files")
		}
	})
	// What glob answers: the .go files newest first, which makes ripgrep
	// stat every file too (and sort on one thread).
	b.Run("rg/files-go-by-mtime", func(b *testing.B) {
		for b.Loop() {
			runRg(b, rg, src, "--files", "-g", "*.go", "--sortr", "modified")
		}
	})
}

func runRg(b *testing.B, rg, dir string, args ...string) {
	cmd := exec.Command(rg, append(slices.Clone(rgArgs), args...)...)
	cmd.Dir = dir
	if out, err := cmd.Output(); err != nil || len(out) == 0 {
		b.Fatalf("rg %v: %v", args, err)
	}
}
