package test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPkgImportsNoInternal holds pkg/ to standing on its own: no package
// under pkg/ may depend, directly or through another, on internal/ (its
// tests may: they start real servers).
func TestPkgImportsNoInternal(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "../pkg/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list named %d packages under pkg/:\n%s", len(lines), out)
	}
	for _, l := range lines {
		pkg, deps, _ := strings.Cut(l, " ")
		for _, d := range strings.Fields(deps) {
			if strings.HasPrefix(d, "github.com/toolgate/toolgate/internal/") {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}
