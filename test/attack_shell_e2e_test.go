package test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// An attack is a command that gets past a gate which judges it wrongly,
// and the file it leaves behind when it runs. Each one is first run with
// bash directly, to show the payload really does what it is meant to;
// then it is sent to a worker with bubblewrap, and the marker must not
// exist afterwards. The gate may ask (the call parks, nobody approves) or
// deny; when the class is one the gate must deny, the result says so.
type attack struct {
	name    string
	command string
	marker  string // relative to the workspace; created by the payload
	canary  string // relative to the workspace; removed by the payload
	leak    string // text of a secret the payload would print
	deny    bool   // the call must be denied, not only parked
	setup   func(t *testing.T, dir string)
}

// runDirect runs the attack with bash in a copy of its setting, HOME
// included, and reports whether the payload had its effect.
func (a attack) runDirect(t *testing.T) bool {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if a.setup != nil {
		a.setup(t, dir)
	}
	cmd := exec.Command("bash", "-c", a.command)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8"}
	out, _ := cmd.CombinedOutput()
	return a.happened(dir) || (a.leak != "" && strings.Contains(string(out), a.leak))
}

func (a attack) happened(dir string) bool {
	if a.marker != "" {
		if _, err := os.Lstat(filepath.Join(dir, a.marker)); err == nil {
			return true
		}
	}
	if a.canary != "" {
		if _, err := os.Lstat(filepath.Join(dir, a.canary)); err != nil {
			return true
		}
	}
	return false
}

// openUp makes dir and every directory under it writable by anyone.
func openUp(t *testing.T, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.IsDir() {
			return err
		}
		return os.Chmod(p, 0o777)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// send calls bash through the worker and returns the final result, or the
// pending one when the call parks.
func send(t *testing.T, c *client.Client, command string) events.ResultData {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pending := make(chan events.ResultData, 1)
	final := make(chan events.ResultData, 1)
	go func() {
		res, err := c.Call(ctx, "bash", map[string]any{"command": command},
			client.OnPending(func(r events.ResultData) { pending <- r }))
		if err != nil {
			final <- events.ResultData{Status: "error", Output: err.Error()}
			return
		}
		final <- *res
	}()
	select {
	case r := <-pending:
		return r
	case r := <-final:
		return r
	case <-ctx.Done():
		t.Fatalf("%s: no result", command)
	}
	return events.ResultData{}
}

// runAttacks starts a worker (bubblewrap required) under the policy doc
// ("" for the built-in policy), changed by mods, and runs every attack
// against it.
func runAttacks(t *testing.T, doc string, attacks []attack, mods ...func(*daemon.Options)) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	testenv.LookPath(t, "bash", "bash")
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "main.go"), "package main\n")
	for _, a := range attacks {
		if a.setup != nil {
			a.setup(t, ws)
		}
	}
	// Commands run as the workspace's owner, or as nobody when that is
	// root: let them write, so that a payload that gets through has its
	// effect and the test sees it.
	openUp(t, ws)
	p := startProcess(t, ws, func(o *daemon.Options) {
		o.Sandbox = bash.ModeRequire
		if doc != "" {
			// Outside every root the policy may open (seed 000's opens
			// /tmp): the worker refuses a policy an agent could reach.
			f := filepath.Join(stateTempDir(t), "policy.yaml")
			writeFile(t, f, doc)
			o.PolicyFile = f
		}
		for _, m := range mods {
			m(o)
		}
	})
	c := p.client(t, "agent-attack")
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			if !a.runDirect(t) {
				t.Fatalf("the payload of %q has no effect when run by bash itself; the test proves nothing", a.command)
			}
			// Every attack starts from the same workspace: no marker, the
			// canary in place.
			if a.marker != "" {
				_ = os.Remove(filepath.Join(ws, a.marker))
			}
			if a.setup != nil {
				a.setup(t, ws)
				openUp(t, ws)
			}
			r := send(t, c, a.command)
			if a.happened(ws) || (a.leak != "" && strings.Contains(r.Output, a.leak)) {
				t.Fatalf("%q had its effect through the worker: %s %+v\n%s", a.command, r.Status, r.Decision, r.Output)
			}
			switch {
			case a.deny && r.Status != events.StatusDenied:
				t.Fatalf("%q: status %s (%+v), want denied", a.command, r.Status, r.Decision)
			case r.Status != events.StatusDenied && r.Status != events.StatusPending:
				t.Fatalf("%q: status %s (%+v), want denied or parked", a.command, r.Status, r.Decision)
			}
		})
	}
}

// Class 1: words bash evaluates as variable names run the command
// substitutions in their subscripts.
func TestAttackNamesAndArithmetic(t *testing.T) {
	runAttacks(t, "", []attack{
		{name: "printf -v", command: `printf -v 'a[$(touch m1a)]' v`, marker: "m1a"},
		{name: "read", command: `read -r 'a[$(touch m1b)]' < main.go`, marker: "m1b"},
		{name: "test -v", command: `test -v 'a[$(touch m1c)]'`, marker: "m1c"},
		{name: "[ -v ]", command: `[ -v 'a[$(touch m1d)]' ]`, marker: "m1d"},
		{name: "declare", command: `declare 'a[$(touch m1e)]=1'`, marker: "m1e"},
		{name: "unset", command: `a=(1); unset 'a[$(touch m1f)]'`, marker: "m1f"},
		{name: "through command", command: `command printf -v 'a[$(touch m1h)]' v`, marker: "m1h"},
		{name: "declare array value", command: `declare -a 'a=($(touch m1i))'`, marker: "m1i"},
		{name: "declare quoted value", command: `declare -a a='($(touch m1j))'`, marker: "m1j"},
	})
}

// Class 2: getopt_long takes unique prefixes of long options.
func TestAttackAbbreviatedOptions(t *testing.T) {
	runAttacks(t, "", []attack{
		{name: "sed --expr e", command: `sed --expr='1e touch m2a' main.go`, marker: "m2a"},
		{name: "sed -n clustered e", command: `sed -ne '1e touch m2b' main.go`, marker: "m2b"},
		{name: "sed script after operand", command: `sed -n main.go --exp '1e touch m2c'`, marker: "m2c"},
		{name: "sort --outp", command: `sort --outp=m2d main.go`, marker: "m2d"},
		{name: "sort clustered -o", command: `sort -rom2e main.go`, marker: "m2e"},
		{name: "sed --in-pl w", command: `sed --in-pl -e 's/package/x/w m2f' main.go`, marker: "m2f"},
	})
}

// Class 4: login and interactive shells read startup files the agent
// can write.
func TestAttackStartupFiles(t *testing.T) {
	profile := func(t *testing.T, dir string) {
		for _, f := range []string{".profile", ".bash_profile", ".bashrc"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("touch m4 2>/dev/null\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	runAttacks(t, "", []attack{
		{name: "bash -lc", command: `bash -lc true`, marker: "m4", setup: profile},
		{name: "bash --login", command: `bash --login -c true`, marker: "m4", setup: profile},
		{name: "bash -ic", command: `bash -ic true`, marker: "m4", setup: profile},
		{name: "BASH_ENV", command: `BASH_ENV=.bashrc bash -c true`, marker: "m4", setup: profile},
	})
}

// Class 5: a directory an option changes into is a path like any other:
// listing it shows what lies outside the workspace (here /etc, which the
// sandbox shows read-only).
func TestAttackDirectoryOptions(t *testing.T) {
	if _, err := os.Stat("/etc/os-release"); err != nil {
		t.Fatal("no /etc/os-release (Debian package base-files) to look for:", err)
	}
	runAttacks(t, "", []attack{
		{name: "env -C", command: `env -C /etc ls`, leak: "os-release"},
		{name: "env --ch", command: `env --ch=/etc ls`, leak: "os-release"},
		{name: "env -iC clustered", command: `env -iC /etc /bin/ls`, leak: "os-release"},
		{name: "env --chdir value", command: `env --chdir /etc ls -a`, leak: "os-release"},
	})
}

// Class 7: settings programs read from the environment, and neutral
// builtins riding along a whitelist that does not name them.
func TestAttackEnvironmentAndWhitelist(t *testing.T) {
	testenv.LookPath(t, "npm", "npm")
	pkg := func(t *testing.T, dir string) {
		writeFile(t, filepath.Join(dir, "package.json"), `{"name":"w","version":"1.0.0","scripts":{"test":"true"}}`+"\n")
		writeFile(t, filepath.Join(dir, "evil.sh"), "#!/bin/sh\ntouch m7a\n")
		if err := os.Chmod(filepath.Join(dir, "evil.sh"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	doc := "tools:\n  default: ask\n  run_shell:\n    action: ask\n    whitelist: [\"npm test\", \"ls *\"]\n"
	runAttacks(t, doc, []attack{
		{name: "npm_config_script_shell", command: `npm_config_script_shell=./evil.sh npm test`, marker: "m7a", setup: pkg},
		{name: "through env", command: `env npm_config_script_shell=./evil.sh npm test`, marker: "m7a", setup: pkg},
		{name: "exported", command: `export npm_config_script_shell=./evil.sh; npm test`, marker: "m7a", setup: pkg},
		{name: "printf -v rides along", command: `printf -v 'a[$(touch m7b)]' v; ls`, marker: "m7b"},
		{name: "test -v rides along", command: `test -v 'a[$(touch m7c)]' && ls`, marker: "m7c"},
	})
}

// Class 9: what the built-in policy forbids is denied wherever it appears.
func TestAttackForbiddenAnywhere(t *testing.T) {
	canary := func(t *testing.T, dir string) {
		writeFile(t, filepath.Join(dir, "keep", "canary.txt"), "alive\n")
	}
	runAttacks(t, "", []attack{
		{name: "after &&", command: `ls && rm -r --no-preserve-root keep`, canary: "keep/canary.txt", deny: true, setup: canary},
		{name: "in bash -c", command: `ls; bash -c 'rm -r --no-preserve-root keep'`, canary: "keep/canary.txt", deny: true, setup: canary},
		{name: "in a subscript", command: `printf -v 'a[$(rm -r --no-preserve-root keep)]' v`, canary: "keep/canary.txt", deny: true, setup: canary},
		{name: "in a function", command: `f() { rm -r --no-preserve-root keep; }; f`, canary: "keep/canary.txt", deny: true, setup: canary},
	})
}

// Programs that write without naming what they write: an extraction into
// the working directory, which holds package-manager configuration it can
// replace, and a decompression whose output is such configuration. Under
// a policy that runs every command and allows writes, they ask like
// `tar -xf a.tar -C .` does.
func TestAttackImplicitWrites(t *testing.T) {
	testenv.LookPath(t, "tar", "tar")
	testenv.LookPath(t, "gzip", "gzip")
	archive := func(t *testing.T, dir string) {
		writeFile(t, filepath.Join(dir, ".npmrc"), "fund=false\n")
		writeArchive(t, filepath.Join(dir, "x.tar"), ".gitmodules", "[submodule \"m\"]\n\tpath = m\n\turl = ./evil\n")
		writeGzip(t, filepath.Join(dir, ".gitattributes.gz"), "* filter=evil\n")
		writeFile(t, filepath.Join(dir, "sub", ".npm"), "script-shell=./evil.sh\n")
	}
	doc := "tools:\n  write: allow\n  edit: allow\nexec:\n  security: full\n"
	runAttacks(t, doc, []attack{
		{name: "tar -xf", command: `tar -xf x.tar`, marker: ".gitmodules", setup: archive},
		{name: "tar xf old style", command: `tar xf x.tar`, marker: ".gitmodules", setup: archive},
		{name: "tar --extract", command: `tar --extract --file=x.tar`, marker: ".gitmodules", setup: archive},
		{name: "tar from stdin", command: `tar -xf - < x.tar`, marker: ".gitmodules", setup: archive},
		{name: "gunzip", command: `gunzip -k .gitattributes.gz`, marker: ".gitattributes", setup: archive},
		{name: "gzip -d", command: `gzip -dk .gitattributes.gz`, marker: ".gitattributes", setup: archive},
		// The suffix, attached, names the file: sub/.npm becomes sub/.npmrc.
		{name: "gzip -S attached", command: `gzip -kSrc sub/.npm`, marker: "sub/.npmrc", setup: archive},
	})
}

// writeArchive writes a tar archive at path holding one file.
func writeArchive(t *testing.T, path, name, content string) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b.String())
}

// writeGzip writes content gzipped at path.
func writeGzip(t *testing.T, path, content string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b.String())
}
