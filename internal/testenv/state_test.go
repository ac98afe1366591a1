package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/identity"
)

func TestMain(m *testing.M) { Main(m) }

// Every test binary that can reach the state directory (it links
// pkg/trust, whose StatePath internal/identity uses too) runs its tests
// through Main, so no test reads or writes the real user's keys and tokens.
func TestEveryTestBinaryIsolatesState(t *testing.T) {
	const ident = "github.com/toolgate/toolgate/pkg/trust"
	out, err := exec.Command("go", "list", "-test", "-f",
		`{{if .ForTest}}{{else}}{{if eq .Name "main"}}{{.ImportPath}}|{{range .Deps}}{{.}} {{end}}{{end}}{{end}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dirs, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Dir}}", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dirOf := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(dirs)), "\n") {
		if p, d, ok := strings.Cut(l, "|"); ok {
			dirOf[p] = d
		}
	}
	calls := regexp.MustCompile(`\b(testenv\.)?Main\(m\)`)
	checked := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		bin, deps, ok := strings.Cut(l, "|")
		if !ok || !strings.HasSuffix(bin, ".test") || !strings.Contains(" "+deps, " "+ident+" ") {
			continue
		}
		pkg := strings.TrimSuffix(bin, ".test")
		files, _ := filepath.Glob(filepath.Join(dirOf[pkg], "*_test.go"))
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || calls.MatchString(testMainBody(string(b)))
		}
		if !found {
			t.Errorf("%s: its tests reach the state directory but no TestMain calls testenv.Main(m)", pkg)
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("checked only %d test binaries: is the go list query right?", checked)
	}
}

// Main's state directory is its own, and outside the temp directory
// (where some tests' policies let tools read) wherever HOME is.
func TestMainStateIsApart(t *testing.T) {
	dir, err := identity.StatePath()
	if err != nil {
		t.Fatal(err)
	}
	if home, err := os.UserHomeDir(); err == nil && identity.Within(dir, filepath.Join(home, ".local", "state")) {
		t.Errorf("state directory %s is the user's", dir)
	}
	if identity.Within(dir, os.TempDir()) || identity.Within(dir, "/tmp") {
		t.Errorf("state directory %s is inside the temp directory", dir)
	}
	for _, env := range UserEnv {
		if v, ok := os.LookupEnv(env); ok {
			t.Errorf("%s=%q reaches the tests", env, v)
		}
	}
}

// testMainBody is the body of the TestMain function of a Go file, or "".
func testMainBody(src string) string {
	const head = "\nfunc TestMain(m *testing.M) {"
	i := strings.Index(src, head)
	if i < 0 {
		return ""
	}
	body := src[i+len(head):]
	if nl := strings.IndexByte(body, '\n'); nl >= 0 && strings.HasSuffix(strings.TrimSpace(body[:nl]), "}") {
		return body[:nl] // a one-line function
	}
	if end := strings.Index(body, "\n}"); end >= 0 {
		return body[:end]
	}
	return ""
}
