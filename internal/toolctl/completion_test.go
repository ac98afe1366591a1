package toolctl

import (
	"bytes"
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// needProgram skips without the shell, and fails under CI, which
// installs it.
func needProgram(t *testing.T, name string) string {
	t.Helper()
	p, err := osexec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (CI installs it)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// runToolctl runs toolctl in-process against no server.
func runToolctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = Run(context.Background(), append([]string{"--nats", "nats://127.0.0.1:1"}, args...), &o, &e)
	return o.String(), e.String(), code
}

// commandNames are the commands of the table, as the fish script lists
// them.
func commandNames(t *testing.T) []string {
	t.Helper()
	out, _, code := runToolctl(t, "completion", "fish")
	if code != ExitOK {
		t.Fatalf("completion fish: exit %d", code)
	}
	m := regexp.MustCompile(`(?m)^set -l toolctl_commands (.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no command list in the fish script:\n%s", out)
	}
	names := strings.Fields(m[1])
	for _, want := range []string{"call", "policy", "version", "completion", "nats-config"} {
		if !slices.Contains(names, want) {
			t.Fatalf("command list %v lacks %s", names, want)
		}
	}
	return names
}

// TestEveryCommandHasHelp: `toolctl COMMAND --help` describes every
// command of the table, without reaching for a server.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, name := range commandNames(t) {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, code := runToolctl(t, name, "--help")
			help := stdout + stderr
			if code != ExitOK && code != ExitUsage {
				t.Fatalf("exit %d (a help request must not fail otherwise):\n%s", code, help)
			}
			if !strings.Contains(strings.ToLower(help), "usage") || !strings.Contains(help, name) {
				t.Fatalf("no usage of %s in:\n%s", name, help)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var o, e bytes.Buffer
		if code := Run(context.Background(), args, &o, &e); code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, e.String())
		}
		// A test binary has no VCS stamp, and says so.
		if !regexp.MustCompile(`^toolctl (\S+ commit \S+ built \S+|\(devel\) from \S+ source without version control information \(.*\)) go\S+\n$`).MatchString(o.String()) {
			t.Errorf("%v printed %q", args, o.String())
		}
	}
}

func TestCompletionUnknownShell(t *testing.T) {
	if _, stderr, code := runToolctl(t, "completion", "tcsh"); code != ExitUsage || !strings.Contains(stderr, "tcsh") {
		t.Fatalf("completion tcsh: exit %d, %q", code, stderr)
	}
}

// TestCompletionBash sources the bash script and asks it what it
// completes, as bash does on TAB.
func TestCompletionBash(t *testing.T) {
	bash := needProgram(t, "bash")
	script, _, code := runToolctl(t, "completion", "bash")
	if code != ExitOK {
		t.Fatalf("completion bash: exit %d", code)
	}
	file := filepath.Join(t.TempDir(), "toolctl.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		line string // the words typed; the last one is being completed
		want []string
		not  []string
	}{
		{"toolctl po", []string{"policy"}, nil},
		{"toolctl ", []string{"call", "tools", "approvals", "completion", "version"}, nil},
		{"toolctl --nats nats://x:4222 app", []string{"approvals"}, nil},
		{"toolctl policy ", []string{"check", "lint", "test", "default", "push", "amendments"}, nil},
		{"toolctl policy check ", nil, []string{"lint"}},
		{"toolctl call --f", []string{"--follow"}, nil},
		{"toolctl creds --", []string{"--out", "--expires", "--nats", "--creds"}, nil},
		{"toolctl hook ", []string{"claude", "codex", "serve"}, nil},
		{"toolctl completion ", []string{"bash", "zsh", "fish"}, nil},
		{"toolctl --", []string{"--nats", "--agent", "--creds", "--version", "--help"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			words := strings.Fields(tt.line)
			if strings.HasSuffix(tt.line, " ") {
				words = append(words, "")
			}
			var q []string
			for _, w := range words {
				q = append(q, "'"+w+"'")
			}
			prog := "source " + file + "\nCOMP_WORDS=(" + strings.Join(q, " ") + ")\nCOMP_CWORD=" +
				strconv.Itoa(len(words)-1) + "\n_toolctl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
			cmd := osexec.Command(bash, "--norc", "--noprofile", "-c", prog)
			cmd.Dir = t.TempDir() // file completion sees nothing
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			for _, w := range tt.want {
				if !slices.Contains(got, w) {
					t.Errorf("%q completes to %v, want %s among them", tt.line, got, w)
				}
			}
			for _, w := range tt.not {
				if slices.Contains(got, w) {
					t.Errorf("%q completes to %v, want no %s", tt.line, got, w)
				}
			}
		})
	}
}

// TestCompletionZsh checks the zsh script's syntax with zsh itself.
func TestCompletionZsh(t *testing.T) {
	zsh := needProgram(t, "zsh")
	script, _, _ := runToolctl(t, "completion", "zsh")
	file := filepath.Join(t.TempDir(), "_toolctl")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := osexec.Command(zsh, "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s\n%s", err, out, script)
	}
	for _, want := range []string{"#compdef toolctl", "'policy:", "_describe"} {
		if !strings.Contains(script, want) {
			t.Errorf("zsh script lacks %q", want)
		}
	}
}

// TestCompletionFish loads the fish script and asks fish what it
// completes (complete -C), as fish does on TAB.
func TestCompletionFish(t *testing.T) {
	fish := needProgram(t, "fish")
	script, _, _ := runToolctl(t, "completion", "fish")
	file := filepath.Join(t.TempDir(), "toolctl.fish")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ line, want string }{
		{"toolctl po", "policy"},
		{"toolctl policy ", "amendments"},
		{"toolctl call --fo", "--follow"},
		{"toolctl --na", "--nats"},
	}
	for _, tt := range tests {
		out, err := osexec.Command(fish, "--no-config", "-c", "source "+file+"; complete -C '"+tt.line+"'").CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v\n%s", err, out)
		}
		var got []string
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				got = append(got, f[0])
			}
		}
		if !slices.Contains(got, tt.want) {
			t.Errorf("%q completes to %v, want %s among them", tt.line, got, tt.want)
		}
	}
}
