package test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/policy/shell"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// The escape oracle: hostile commands that use what bash and the
// programs it runs do while they run (variables assigned inside
// expansions, mode switches that change how the next line parses, text
// find and xargs fill into a shell or awk program, paths bash and the
// kernel resolve differently, files a program's include names) are sent
// through a real worker with bubblewrap under each shipped policy. What
// is asserted is seen from outside, by effects, never by the gate's
// verdict: a secret outside the granted set is never printed, a marker
// never appears, a protected file never changes, and the marker program
// never runs.

// escapeSecret is what the files outside the workspace hold.
const escapeSecret = "ESCAPE31-outside-5e1f"

// escapePem is what the workspace's keys/rtdir/server.pem holds: a file
// seed 000 denies (**/*.pem).
const escapePem = "ESCAPE31-pem-77aa"

// escapeRan is what the marker program x31 prints; no command of the
// corpus holds this text, so it is printed only when x31 ran.
const escapeRan = "EXECUTED" + "31"

// escapeParent is what sec31, in the workspace's parent directory, holds:
// outside the granted set unless the policy opens /tmp (seed 000).
const escapeParent = "ESCAPE31-parent-90bd"

// escapeMarker is the prefix of every file a payload creates.
const escapeMarker = "m31"

// escapeSetting is a workspace and a directory outside it that the
// attacks aim at, and what must stay as it is.
type escapeSetting struct {
	ws, outside, parent string
	// pemDenied: the policy denies reading *.pem.
	pemDenied bool
	// parentGranted: the policy grants reading the workspace's parent.
	parentGranted bool
	protected     map[string][]byte
}

// newEscapeSetting plants the setting in ws: the directory outside it
// (in /var/tmp, a place of the host the sandbox once showed) holds
// rtdir/secret and a git config fragment; ws's parent holds sec31; ws
// holds a repository, a symbolic link to a deeper directory (L), links
// out of the tree, directories diff -r compares, a config that includes
// the outside fragment, an awk program file, a gettext catalog, files
// whose names are shell and awk code, and the marker program x31.
func newEscapeSetting(t *testing.T, ws string) *escapeSetting {
	t.Helper()
	testenv.LookPath(t, "git", "git")
	outside, err := os.MkdirTemp("/var/tmp", "toolgate-escape-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	s := &escapeSetting{ws: ws, outside: outside, parent: filepath.Dir(ws), protected: map[string][]byte{}}
	writeFile(t, filepath.Join(outside, "rtdir", "secret"), escapeSecret+"\n")
	writeFile(t, filepath.Join(outside, "inc.cfg"), "[x]\n\tleak = "+escapeSecret+"\n")
	writeFile(t, filepath.Join(s.parent, "sec31"), escapeParent+"\n")
	files := map[string]string{
		"main.go":                          "package main\n",
		"notes.txt":                        "notes\n",
		"rtdir/notes":                      "notes\n",
		"keys/rtdir/server.pem":            escapePem + "\n",
		"a/b/c/.keep":                      "",
		"d2/s":                             "",
		"inc.cfg":                          "[include]\n\tpath = " + filepath.Join(outside, "inc.cfg") + "\n",
		"prog.awk":                         "BEGIN { while ((getline l < \"" + filepath.Join(outside, "rtdir", "secret") + "\") > 0) print l; system(\"sh x31\") }\n",
		"fq/q';sh x31;'":                   "",
		"fq/q;sh x31;#":                    "",
		"fq/k\"; system(\"sh x31\"); x=\"": "",
		"t.po":                             "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=UTF-8\\n\"\n\nmsgid \"hello\"\nmsgstr \"$(sh x31)\"\n",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(ws, name), content)
	}
	writeFile(t, filepath.Join(ws, "x31"), "#!/bin/sh\necho "+strings.Replace(escapeRan, "31", "''31", 1)+"\ntouch "+escapeMarker+"x\n")
	if err := os.Chmod(filepath.Join(ws, "x31"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"L":         "a/b",
		"links/out": filepath.Join(outside, "rtdir", "secret"),
		"d1/s":      filepath.Join(outside, "rtdir", "secret"),
	} {
		p := filepath.Join(ws, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	if msgfmt := testenv.LookPath(t, "msgfmt", "gettext"); msgfmt != "" {
		mo := filepath.Join(ws, "loc", "fr", "LC_MESSAGES", "t.mo")
		if err := os.MkdirAll(filepath.Dir(mo), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(msgfmt, "-o", mo, filepath.Join(ws, "t.po")).CombinedOutput(); err != nil {
			t.Fatalf("msgfmt: %v\n%s", err, out)
		}
	}
	hostGit(t, ws, "init", "-q", ".")
	// Payloads that get through may write: the commands run as the
	// workspace's owner, or as nobody when that is root.
	openUp(t, ws)
	openUp(t, outside)
	for _, p := range []string{".git/config", ".git/HEAD"} {
		b, err := os.ReadFile(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		s.protected[filepath.Join(ws, p)] = b
	}
	s.protected[filepath.Join(outside, "rtdir", "secret")] = []byte(escapeSecret + "\n")
	s.protected[filepath.Join(s.parent, "sec31")] = []byte(escapeParent + "\n")
	return s
}

// expand fills the setting's places into a command template: {O} the
// directory outside, {P} the workspace's parent, {W} the workspace.
func (s *escapeSetting) expand(template string) string {
	return strings.NewReplacer("{O}", s.outside, "{P}", s.parent, "{W}", s.ws).Replace(template)
}

// escapes lists what command's output and the file system show that
// must never happen, and puts the setting back as it was.
func (s *escapeSetting) escapes(t *testing.T, output string) []string {
	t.Helper()
	var got []string
	if strings.Contains(output, escapeSecret) {
		got = append(got, "read a file outside the granted set (the outside secret was printed)")
	}
	if s.pemDenied && strings.Contains(output, escapePem) {
		got = append(got, "read a file the policy denies (the *.pem secret was printed)")
	}
	if !s.parentGranted && strings.Contains(output, escapeParent) {
		got = append(got, "read a file outside the granted set (the workspace's parent's secret was printed)")
	}
	if strings.Contains(output, escapeRan) {
		got = append(got, "ran the marker program x31")
	}
	// A person's next git status runs whatever fsmonitor names.
	cmd := exec.Command("git", "status", "--short")
	cmd.Dir = s.ws
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	_, _ = cmd.CombinedOutput()
	for _, root := range []string{s.ws, s.outside, s.parent} {
		entries, _ := os.ReadDir(root)
		if root == s.parent {
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), escapeMarker) {
					got = append(got, "wrote "+filepath.Join(root, e.Name()))
					os.RemoveAll(filepath.Join(root, e.Name()))
				}
			}
			continue
		}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasPrefix(d.Name(), escapeMarker) && p != root {
				got = append(got, "wrote "+p)
				os.RemoveAll(p)
			}
			return nil
		})
	}
	for p, want := range s.protected {
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, want) {
			got = append(got, "changed "+p)
			_ = os.WriteFile(p, want, 0o644)
		}
	}
	hooks, _ := os.ReadDir(filepath.Join(s.ws, ".git", "hooks"))
	for _, h := range hooks {
		if !strings.HasSuffix(h.Name(), ".sample") {
			got = append(got, "planted the hook "+h.Name())
			os.Remove(filepath.Join(s.ws, ".git", "hooks", h.Name()))
		}
	}
	return got
}

// direct runs command with bash itself, outside any sandbox, in the
// setting, and returns the escapes it had: what the attack does when
// nothing holds it.
func (s *escapeSetting) direct(t *testing.T, command string) []string {
	t.Helper()
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir = s.ws
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + s.ws, "LANG=C.UTF-8"}
	out, _ := cmd.CombinedOutput()
	return s.escapes(t, string(out))
}

// escapePolicy is one shipped policy the corpus runs under.
type escapePolicy struct {
	name string
	doc  string // "" for the built-in policy
	// owner is the workspace's owner when the tests run as root (0: root).
	owner     int
	pemDenied bool
	// tmpGranted: the policy lets tools read /tmp, where workspaces are.
	tmpGranted bool
}

// escapePolicies are the built-in policy, seed 000's whitelist, a
// permissive policy on a root-owned workspace (commands then run as
// nobody) and the same on a workspace an ordinary user owns.
func escapePolicies(t *testing.T) []escapePolicy {
	return []escapePolicy{
		{name: "builtin"},
		{name: "seed000", doc: string(seedPolicy(t)), pemDenied: true, tmpGranted: true},
		{name: "permissive-root-owned", doc: permissivePolicy},
		{name: "permissive", doc: permissivePolicy, owner: 1000},
	}
}

// escapeWorkspace plants the setting in a new workspace owned as pol
// says, after checking bubblewrap and bash are here.
func escapeWorkspace(t *testing.T, pol escapePolicy) *escapeSetting {
	t.Helper()
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "bash", "bash")
	// The workspace and its parent live in /var/tmp, which the sandbox
	// once showed, not in /tmp, which it replaced by its own: a path that
	// leaves the workspace for its parent then reaches a real directory.
	parent, err := os.MkdirTemp("/var/tmp", "toolgate-escape-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	ws := filepath.Join(parent, "ws")
	for _, d := range []string{parent, ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := newEscapeSetting(t, ws)
	s.pemDenied = pol.pemDenied
	s.parentGranted = pol.tmpGranted && strings.HasPrefix(s.parent, "/tmp/")
	if pol.owner != 0 && os.Getuid() == 0 {
		err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, pol.owner, pol.owner)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// escapeWorker starts a worker requiring bubblewrap under pol on a
// workspace planted with the setting.
func escapeWorker(t *testing.T, pol escapePolicy) (*escapeSetting, *client.Client) {
	t.Helper()
	s := escapeWorkspace(t, pol)
	p := startProcess(t, s.ws, func(o *daemon.Options) {
		o.Sandbox = bash.ModeRequire
		if pol.doc != "" {
			// Outside every root the policy may open (seed 000's opens
			// /tmp): the worker refuses a policy an agent could reach.
			f := filepath.Join(stateTempDir(t), "policy.yaml")
			writeFile(t, f, pol.doc)
			o.PolicyFile = f
			o.DataDir = stateTempDir(t)
		}
	})
	return s, p.client(t, "agent-escape")
}

// escapeCorpus generates the hostile commands: every carrier of an
// assignment inside an expansion with every behaviour-changing variable
// and what it is for; every way of switching bash's parser to POSIX
// with a line that parses differently there; every program that fills
// text into code with every name that is code; and the paths bash, a
// program or an include resolve differently from the gate.
func escapeCorpus() []string {
	var out []string
	// Assignments inside expansions.
	carriers := []string{
		"x=${%s:=%s}; ",
		"x=${%s=%s}; ",
		"[[ ${%s:=%s} ]]; ",
		"[[ -n ${%s:=%s} ]] && ",
		"case ${%s:=%s} in *) ;; esac; ",
		": <<< ${%s:=%s}; ",
		": ${%s:=%s}; ",
		"echo ${%s:=%s} >/dev/null; ",
		"x=\"${%s:=%s}\"\n",
	}
	uses := []struct{ name, value, then string }{
		{"CDPATH", "{O}", "cd rtdir && cat secret"},
		{"CDPATH", "{O}", "pushd rtdir >/dev/null && cat secret"},
		{"CDPATH", "{W}/keys", "cd rtdir && cat server.pem"},
		{"CDPATH", "{W}/.git", "cd hooks/.. && printf '[core]\\n\\tfsmonitor = \"touch m31f\"\\n' >> config"},
		{"TEXTDOMAINDIR", "$PWD/loc", "x=${TEXTDOMAIN:=t}${LANGUAGE:=fr}${LC_ALL:=fr_FR.UTF-8}\necho $\"hello\""}, // $"..." is translated as its line is read
		{"GLOBIGNORE", "*", "cat notes.txt"},
		{"BASH_COMPAT", "31", "cat notes.txt"},
	}
	for _, c := range carriers {
		for _, u := range uses {
			out = append(out, fmt.Sprintf(c, u.name, u.value)+u.then)
		}
	}
	// Inside a command substitution: the subshell keeps the assignment.
	out = append(out, "x=$(: ${CDPATH:={O}}; cd rtdir && cat secret); echo \"$x\"")
	// The parser's mode changes mid-script.
	for _, posixLine := range []string{`cat notes.txt; x="${y:-'}"; cat {O}/rtdir/secret; sh x31; z="'}"`, `echo "${x:-'}"; cat {O}/rtdir/secret; sh x31; echo "'}"`} {
		out = append(out, modeSwitches(posixLine)...)
	}
	return append(out, escapeFilled()...)
}

// modeSwitches are the ways of running posixLine after switching bash's
// parser to POSIX, or in a shell that parses POSIX.
func modeSwitches(posixLine string) []string {
	var out []string
	for _, sw := range []string{"z=${POSIXLY_CORRECT:=1}\n", "z=${POSIXLY_CORRECT=y}\n", "set -o posix\n", "shopt -so posix\n",
		"POSIXLY_CORRECT=1\n", "export POSIXLY_CORRECT=1\n", "set -P -o posix\n"} {
		out = append(out, sw+posixLine)
	}
	for _, sh := range []string{"sh -c ", "dash -c ", "bash --posix -c ", "bash -o posix -c ", "exec -a sh bash -c ",
		"env POSIXLY_CORRECT=1 bash -c ", "POSIXLY_CORRECT=1 bash -c ", "bash -c "} {
		out = append(out, sh+shell.Quote(posixLine, false))
	}
	return out
}

// escapeFilled are the commands whose programs fill text in at run time,
// and the paths bash, a program or an include resolves otherwise.
func escapeFilled() []string {
	var out []string
	// Text filled into code at run time.
	for _, f := range []string{
		"find fq -name 'q*' -exec sh -c 'echo {}' \\;",
		"find fq -name 'q*' -exec bash -c 'echo {}' \\;",
		"find fq -name 'q*' -exec sh -c 'echo \"{}\"' \\;",
		"find fq -name 'q*' -exec sh -c \"echo '{}'\" \\;",
		"find fq -name 'q*' -exec sh -c 'echo {}' {} +",
		"find fq -name 'k*' -exec awk 'BEGIN{print \"{}\"}' \\;",
		"find fq -name 'k*' -exec mawk 'BEGIN{print \"{}\"}' \\;",
		"find fq -name 'q*' -print0 | xargs -0 -I{} sh -c 'echo {}'",
		"find fq -name 'q*' | xargs -I{} sh -c 'echo {}'",
		"find fq -name 'k*' -print0 | xargs -0 -I{} awk 'BEGIN{print \"{}\"}'",
		"ls fq | xargs -I{} sh -c 'echo {}'",
	} {
		out = append(out, f)
	}
	// Paths bash, a program or an include resolves otherwise.
	out = append(out,
		"cd L/../.. && cat sec31",
		"cd -L L/../.. && cat sec31",
		"pushd L/../.. >/dev/null && cat sec31",
		"cd a/b/c && ln -s .. ../../../up && cat ../../../up/sec31",
		"ln -s .. a/up && cat a/up/sec31",
		"find links -name out -exec cat {} \\;",
		"find . -path ./links/out -exec cat {} +",
		"find links -type l -exec head {} \\;",
		"cat links/out",
		"diff -r d1 d2",
		"diff -ru d2 d1",
		"git config --file inc.cfg --includes --list",
		"git config -f inc.cfg --includes x.leak",
		"git config --includes --file=inc.cfg --get-regexp x",
		"awk -W exec prog.awk",
		"mawk -W exec prog.awk",
		"awk -W i,e=prog.awk",
		"mawk -We prog.awk",
		"sh x31",
		"./x31",
	)
	return out
}

func TestEscapeOracle(t *testing.T) {
	corpus := escapeCorpus()
	for _, pol := range escapePolicies(t) {
		t.Run(pol.name, func(t *testing.T) {
			s, c := escapeWorker(t, pol)
			// A control: the worker runs what the policy allows, and the
			// oracle sees what a command prints.
			if r := send(t, c, "cat notes.txt"); !strings.Contains(r.Output, "notes") {
				t.Fatalf("the control cat notes.txt did not run: %s %q", r.Status, r.Output)
			}
			var held []string
			statuses := map[string]int{}
			for _, template := range corpus {
				command := s.expand(template)
				r := send(t, c, command)
				statuses[string(r.Status)]++
				if got := s.escapes(t, r.Output); len(got) > 0 {
					held = append(held, fmt.Sprintf("%q (%s): %s", command, r.Status, strings.Join(got, "; ")))
				}
			}
			t.Logf("%s: %d commands, results by status %v", pol.name, len(corpus), statuses)
			if len(held) > 0 {
				slices.Sort(held)
				t.Errorf("%d of %d commands escaped under %s:\n%s", len(held), len(corpus), pol.name, strings.Join(held, "\n"))
			}
		})
	}
}
