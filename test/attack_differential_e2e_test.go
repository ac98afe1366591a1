package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/testenv"
)

// The parser-differential class: the gate judged a tree of its own
// parser while bash ran the text, and every place the two read the text
// differently was a hole. Seven members of it, found by an outside
// attack, each shown to work with bash itself, then sent through a worker
// with bubblewrap under the built-in policy and under seed 000's
// whitelist-only policy: the effect never happens.

// pemSecret is the content of a file seed 000 denies (**/*.pem),
// committed to the workspace's repository.
const pemSecret = "PEMSECRET23-7f3a"

// passwdLeak is what /etc/passwd, outside the workspace, prints.
const passwdLeak = "root:x:0:0"

// differentialSetting plants what the payloads use: a README for less, a
// lesskey (read from $HOME) whose LESSOPEN runs a program, an argument
// file naming a file outside the workspace, sort's data and a file named
// like sort's --compress-program option, and a repository holding a
// denied file.
func differentialSetting(t *testing.T, dir string) {
	t.Helper()
	lesskey := "#env\nLESSOPEN=|touch m23h; cat %s\n"
	files := map[string]string{
		"README.md":             "hello\n",
		".lesskey":              lesskey,
		"a/.lesskey":            lesskey,
		"args":                  "/etc/passwd\n",
		"--compress-program=sh": "",
		"data.txt":              strings.Repeat("touch m23d\n", 300),
		"server.pem":            pemSecret + "\n",
		"sub/.keep":             "",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
		return
	}
	hostGit(t, dir, "init", "-q")
	hostGit(t, dir, "add", "server.pem", "main.go")
	hostGit(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
}

// differentialAttacks are the payloads of the seven classes that work
// under either policy; seed000 adds those about files it denies.
func differentialAttacks(seed000 bool) []attack {
	s := differentialSetting
	as := []attack{
		// 1: a comment ending in a backslash hid the next line.
		{name: "1 comment backslash", command: "ls # \\\nsh -c 'touch m23a'", marker: "m23a", setup: s},
		// 2: sh strings are POSIX shell (dash), not bash.
		{name: "2 sh [[ ||", command: `sh -c '[[ x || touch m23b ]]'`, marker: "m23b", setup: s},
		{name: "2 sh [[ >", command: `sh -c '[[ a > m23c ]]'`, marker: "m23c", setup: s},
		// 3: globs and braces over the whole word.
		{name: "3 sort glob", command: `sort -S 1k ["-"]"-compress-program=sh" data.txt`, marker: "m23d", setup: s},
		{name: "3 sort brace", command: `sort -S 1k {"--compress-program=sh",data.txt}`, marker: "m23d", setup: s},
		{name: "3 cat brace outside", command: `cat {"/etc/passwd",x}`, leak: passwdLeak, setup: s},
		// 4: jobs -x runs a command.
		{name: "4 jobs -x", command: `jobs -x touch m23f`, marker: "m23f", setup: s},
		// 5: names assigned by builtins and loops.
		{name: "5 for HOME", command: `for HOME in .; do less README.md; done`, marker: "m23h", setup: s},
		{name: "5 printf -v HOME", command: `printf -v HOME %s .; less README.md`, marker: "m23h", setup: s},
		{name: "5 read HOME", command: `read HOME <<< .; less README.md`, marker: "m23h", setup: s},
		{name: "5 getopts HOME", command: `getopts a HOME -a; less README.md`, marker: "m23h", setup: s},
		{name: "5 cd - OLDPWD", command: `read OLDPWD <<< /etc; cd - >/dev/null; cat passwd`, leak: passwdLeak, setup: s},
		{name: "5 CDPATH", command: `read CDPATH <<< /; cd etc >/dev/null && cat passwd`, leak: passwdLeak, setup: s},
		// 6: files named in program text or response files.
		{name: "6 awk ARGV", command: `awk 'BEGIN{ARGV[ARGC++]="/etc/passwd"} {print}' </dev/null`, leak: passwdLeak, setup: s},
		{name: "6 strings @file", command: `strings @args`, leak: passwdLeak, setup: s},
	}
	if seed000 {
		as = append(as,
			attack{name: "3 cat glob past **/*.pem", command: `cat server.pe["m"]`, leak: pemSecret, setup: s},
			attack{name: "3 git diff brace option", command: `git diff {"--output=m23e",HEAD}`, marker: "m23e", setup: s},
			// 7: git's history behind denied paths.
			attack{name: "7 git diff empty tree", command: `git diff 4b825dc642cb6eb9a060e54bf8d69288fbee4904 HEAD`, leak: pemSecret, setup: s},
			attack{name: "7 git diff pathspec dir", command: `git diff 4b825dc642cb6eb9a060e54bf8d69288fbee4904 HEAD -- .`, leak: pemSecret, setup: s},
		)
	}
	return as
}

func TestAttackParserDifferentialBuiltin(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	testenv.LookPath(t, "less", "less")
	runAttacks(t, "", differentialAttacks(false))
}

func TestAttackParserDifferentialSeed000(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	testenv.LookPath(t, "less", "less")
	// The policy opens /tmp to the tools: the store must live elsewhere.
	runAttacks(t, string(seedPolicy(t)), differentialAttacks(true), func(o *daemon.Options) { o.DataDir = stateTempDir(t) })
}
