package bash

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// git runs programs named in its configuration and attributes: diff and
// merge drivers, clean/smudge filters, fsmonitor, hooks, pagers, editors,
// ssh and proxy commands, credential helpers, upload-pack, gpg, aliases.
// An agent that may write files in the workspace could name a program
// there and have an allowed, read-only-looking git command run it. Four
// layers take that away:
//
//   - the environment (gitEnv, every call, sandbox or not): no system or
//     global config file, the program-running keys with fixed names
//     overridden through GIT_CONFIG_COUNT (which outranks every file), the
//     GIT_* variables that outrank config (pager, editor, ssh, askpass),
//     and only the http, https and ssh transports (no ext::, no local
//     upload-pack, no git:// proxy);
//   - the sandbox (gitMounts, calls no person approved): the repository's
//     config files are replaced, read-only, by sanitised copies that keep
//     only settings that run nothing (drivers, filters, includes,
//     aliases, remote programs and the like dropped), and its hooks
//     directories by empty read-only ones, so neither what was planted
//     before the call nor what the command writes during it runs;
//   - the git wrapper (gitWrapperMounts, every sandboxed call): git in
//     PATH and in its exec path is replaced by a script that sets the
//     environment layer again and removes the variables that name
//     programs, so a command that empties its environment (env -i,
//     unset) still runs git neutralised;
//   - the path judgement (pkg/policy): writing .git/**, .gitattributes or
//     .gitmodules through any tool asks a person.

// gitSafety is configuration every git a command runs gets with the
// highest precedence (GIT_CONFIG_COUNT outranks every config file).
// Keys whose name the agent chooses (diff.<driver>.command,
// remote.<name>.uploadpack) cannot be listed here; the sandbox's
// sanitised config removes them.
var gitSafety = [][2]string{
	{"core.fsmonitor", "false"},         // run on git status, diff, ...
	{"core.hooksPath", "/dev/null"},     // hooks of commit, checkout, merge, ...
	{"safe.bareRepository", "explicit"}, // a planted bare repository's config
	{"core.pager", "cat"},               // a pager is a program
	{"core.editor", "false"},            // so is an editor
	{"sequence.editor", "false"},
	{"core.askPass", ""},
	{"core.sshCommand", "ssh"},
	{"credential.helper", ""}, // an empty value clears the list
	{"protocol.allow", "never"},
	{"protocol.http.allow", "always"},
	{"protocol.https.allow", "always"},
	{"protocol.ssh.allow", "always"},
	{"uploadpack.packObjectsHook", ""},
	{"log.showSignature", "false"}, // would run gpg.program on git log
	{"gpg.program", "gpg"},
	{"gpg.openpgp.program", "gpg"}, // the same setting by its newer name
	{"gpg.ssh.program", "ssh-keygen"},
	{"gpg.x509.program", "gpgsm"},
	{"gpg.ssh.defaultKeyCommand", "false"}, // run to find a key when signing
}

// gitAllowedProtocols are the transports git may use (GIT_ALLOW_PROTOCOL):
// not file (a local fetch runs remote.<name>.uploadpack), ext (runs a
// command) or git (runs core.gitProxy).
const gitAllowedProtocols = "http:https:ssh"

// gitEnv neutralises git's program-running settings: no system or global
// config file, gitSafety on top of the repository's own, and the
// variables that outrank config. ws is trusted as safe.directory, so that
// git works in a workspace the command's user does not own.
func gitEnv(ws string) map[string]string {
	safety := append(slices.Clone(gitSafety), [2]string{"safe.directory", ws})
	env := map[string]string{
		"GIT_CONFIG_NOSYSTEM":    "1",
		"GIT_CONFIG_GLOBAL":      "/dev/null",
		"GIT_CONFIG_COUNT":       fmt.Sprint(len(safety)),
		"GIT_TERMINAL_PROMPT":    "0",
		"GIT_PAGER":              "cat",
		"PAGER":                  "cat",
		"GIT_EDITOR":             "false",
		"GIT_SEQUENCE_EDITOR":    "false",
		"GIT_ASKPASS":            "",
		"GIT_SSH_COMMAND":        "ssh",
		"GIT_PROXY_COMMAND":      "",
		"GIT_ALLOW_PROTOCOL":     gitAllowedProtocols,
		"GIT_NO_REPLACE_OBJECTS": "1",
	}
	for i, kv := range safety {
		env[fmt.Sprintf("GIT_CONFIG_KEY_%d", i)] = kv[0]
		env[fmt.Sprintf("GIT_CONFIG_VALUE_%d", i)] = kv[1]
	}
	return env
}

// gitKeepSections are the config sections a sanitised config keeps; every
// other section (alias, filter, include, includeIf, pager, credential,
// gpg, difftool, mergetool, sendemail, tar, hook, trace2, ...) is dropped.
var gitKeepSections = map[string]bool{
	"core": true, "extensions": true, "user": true, "author": true, "committer": true,
	"remote": true, "branch": true, "diff": true, "merge": true, "color": true,
	"init": true, "log": true, "status": true, "commit": true, "fetch": true,
	"push": true, "pull": true, "rebase": true, "tag": true, "worktree": true,
	"gc": true, "pack": true, "index": true, "advice": true, "blame": true,
	"grep": true, "http": true, "url": true, "column": true, "am": true,
	"apply": true, "rerere": true, "versionsort": true, "submodule": true,
	"format": true, "i18n": true, "clean": true, "stash": true, "checkout": true,
	"reset": true, "feature": true, "transfer": true, "receive": true,
	"repack": true, "maintenance": true, "notes": true, "interactive": true,
}

// gitDropKey reports whether a key of a kept section still runs a
// program or pulls in other configuration. key is as git config --list
// prints it: section and name lower case, the subsection as written.
func gitDropKey(key string) bool {
	section, rest, _ := strings.Cut(key, ".")
	name := rest
	sub := ""
	if i := strings.LastIndexByte(rest, '.'); i >= 0 {
		sub, name = rest[:i], rest[i+1:]
	}
	switch section {
	case "core":
		switch name {
		case "fsmonitor", "hookspath", "pager", "editor", "sshcommand", "askpass",
			"gitproxy", "alternaterefscommand", "attributesfile", "excludesfile", "worktree":
			return true
		}
	case "diff":
		// diff.external, diff.<driver>.command and .textconv run programs;
		// diff.tool and diff.guitool name difftool programs.
		return name == "external" || name == "command" || name == "textconv" || (sub == "" && (name == "tool" || name == "guitool"))
	case "merge":
		return name == "driver" || (sub == "" && (name == "tool" || name == "guitool"))
	case "remote":
		return name == "uploadpack" || name == "receivepack" || name == "vcs" || name == "proxy"
	case "submodule":
		return name == "update" // update = !command runs it
	case "http":
		return name == "proxy" || name == "cookiefile" || name == "sslkey" || name == "sslcert" || name == "sslcainfo"
	case "receive":
		return name == "procreceiverefs"
	case "worktree":
		return false
	}
	return false
}

// sanitizeGitConfig reads the config file src with git (which does not
// follow include.path in --file mode) and returns a config holding only
// the settings that run no program. A file git cannot read gives an empty
// config: the command then sees none of it.
func sanitizeGitConfig(ctx context.Context, gitPath, src string) []byte {
	if fi, err := os.Stat(src); err != nil || fi.Size() > maxGitConfig {
		return nil // an oversized config is not parsed: the command sees none
	}
	cmd := exec.CommandContext(ctx, gitPath, "config", "--file", src, "--list", "-z")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "PATH=" + defaultPath, "HOME=/nonexistent"}
	cmd.Dir = "/"
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("# sanitised by toolgate: only settings that run no program\n")
	for _, entry := range bytes.Split(out, []byte{0}) {
		if len(entry) == 0 {
			continue
		}
		key, value, hasValue := strings.Cut(string(entry), "\n")
		section, rest, ok := strings.Cut(key, ".")
		if !ok || !gitKeepSections[section] || gitDropKey(key) {
			continue
		}
		sub, name := "", rest
		if i := strings.LastIndexByte(rest, '.'); i >= 0 {
			sub, name = rest[:i], rest[i+1:]
		}
		if !validGitName(section) || !validGitName(name) || strings.ContainsAny(sub, "\n\x00") {
			continue
		}
		if sub == "" {
			fmt.Fprintf(&b, "[%s]\n", section)
		} else {
			fmt.Fprintf(&b, "[%s %s]\n", section, quoteGit(sub))
		}
		if hasValue {
			fmt.Fprintf(&b, "\t%s = %s\n", name, quoteGit(value))
		} else {
			fmt.Fprintf(&b, "\t%s\n", name)
		}
	}
	return b.Bytes()
}

// validGitName reports whether s is a config section or variable name.
func validGitName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// quoteGit is s as a double-quoted config value or subsection name.
func quoteGit(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`, "\b", `\b`)
	return `"` + r.Replace(s) + `"`
}

// Bounds on what gitMounts reads of files the agent may have written.
const (
	maxGitModules = 64      // submodule repositories sanitised
	maxGitDirs    = 1024    // directories visited looking for them
	maxGitConfig  = 1 << 20 // bytes of a config file parsed
	maxGitFile    = 4096    // bytes of a .git file or commondir
)

// gitMounts are the bwrap arguments that, for the workspace ws, replace
// each config file of its repository (and its submodules' repositories)
// with a sanitised read-only copy (data bound from a pipe, see
// sandboxFiles), and each hooks directory with an empty read-only tmpfs.
// A workspace without a repository needs none. Repositories outside the
// workspace are read-only in the sandbox already. Sanitised configs are
// kept in cache while their file is unchanged, so git runs once per
// version of a config, not once per call.
func gitMounts(ctx context.Context, ws string, cache *gitConfigCache, data func([]byte) (string, error)) ([]string, error) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return nil, nil // commands cannot run git either
	}
	gitDir, common := findGitDir(ws)
	if gitDir == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var args []string
	config := func(src string) error {
		// A symbolic link is followed, as git follows it: the sanitised
		// copy covers the file git would read.
		src, err := filepath.EvalSymlinks(src)
		if err != nil {
			return nil // missing: git reads nothing there either
		}
		if _, in := within(ws, src); !in {
			return nil // read-only in the sandbox: not the agent's
		}
		fi, err := os.Stat(src)
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		fd, err := data(cache.sanitized(ctx, gitPath, src, fi))
		if err != nil {
			return err
		}
		args = append(args, "--perms", "0444", "--ro-bind-data", fd, src)
		return nil
	}
	hooks := func(d string) {
		d, err := filepath.EvalSymlinks(d)
		if err != nil {
			return
		}
		if _, in := within(ws, d); !in {
			return
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			args = append(args, "--perms", "0555", "--tmpfs", d, "--remount-ro", d)
		}
	}
	repos := append([]string{common}, submoduleRepos(common)...)
	for _, r := range repos {
		if _, ok := within(ws, r); !ok {
			continue
		}
		if err := config(filepath.Join(r, "config")); err != nil {
			return nil, err
		}
		hooks(filepath.Join(r, "hooks"))
	}
	if _, ok := within(ws, gitDir); ok {
		if err := config(filepath.Join(gitDir, "config.worktree")); err != nil {
			return nil, err
		}
	}
	return args, nil
}

// gitConfigCache keeps the sanitised copy of each config file gitMounts
// covered, while the file is the version it was read from (fileCache):
// git is not run again for it. A stale copy could only hide settings,
// never run a program: every copy was sanitised.
type gitConfigCache struct{ files fileCache[[]byte] }

// newGitConfigCache is an empty gitConfigCache.
func newGitConfigCache() *gitConfigCache {
	return &gitConfigCache{files: fileCache[[]byte]{recent: gitRecent, max: maxGitCached}}
}

// gitRecent is how old a config's last change must be for its sanitised
// copy to be kept.
var gitRecent = 2 * time.Second

// maxGitCached bounds the config files kept.
const maxGitCached = 4 * maxGitModules

// sanitized is sanitizeGitConfig(src), from the cache when src is as it
// was (fi: its file as it is now).
func (c *gitConfigCache) sanitized(ctx context.Context, gitPath, src string, fi fs.FileInfo) []byte {
	if data, ok := c.files.get(src, fi); ok {
		return data
	}
	data := sanitizeGitConfig(ctx, gitPath, src)
	if ctx.Err() == nil {
		c.files.put(src, fi, data)
	}
	return data
}

// submoduleRepos lists the git directories of common's submodules, nested
// ones (modules/a/modules/b) included, at most maxGitModules of them.
func submoduleRepos(common string) []string {
	var out []string
	queue := []string{filepath.Join(common, "modules")}
	for visited := 0; len(queue) > 0 && len(out) < maxGitModules && visited < maxGitDirs; visited++ {
		dir := queue[0]
		queue = queue[1:]
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || len(out) >= maxGitModules {
				continue
			}
			d := filepath.Join(dir, e.Name())
			if _, err := os.Stat(filepath.Join(d, "HEAD")); err == nil {
				out = append(out, d)
				queue = append(queue, filepath.Join(d, "modules"))
			} else {
				queue = append(queue, d) // a submodule named a/b
			}
		}
	}
	return out
}

// findGitDir finds the git directory of the repository at ws: ws/.git
// itself, or the directory a "gitdir: " file there names, and the common
// directory (commondir) of a linked worktree. Both are empty when ws holds
// no repository.
func findGitDir(ws string) (gitDir, common string) {
	dotgit := filepath.Join(ws, ".git")
	fi, err := os.Stat(dotgit)
	switch {
	case err != nil:
		return "", ""
	case fi.IsDir():
		gitDir = dotgit
	case fi.Mode().IsRegular():
		data, err := readSmall(dotgit)
		if err != nil {
			return "", ""
		}
		target, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir:")
		if !ok {
			return "", ""
		}
		target = strings.TrimSpace(target)
		if !filepath.IsAbs(target) {
			target = filepath.Join(ws, target)
		}
		gitDir = filepath.Clean(target)
	default:
		return "", ""
	}
	if real, err := filepath.EvalSymlinks(gitDir); err == nil {
		gitDir = real
	}
	common = gitDir
	if data, err := readSmall(filepath.Join(gitDir, "commondir")); err == nil {
		c := strings.TrimSpace(string(data))
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
		if real, err := filepath.EvalSymlinks(c); err == nil {
			common = real
		}
	}
	return gitDir, common
}

// readSmall reads a file of at most maxGitFile bytes.
func readSmall(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxGitFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", p, maxGitFile)
	}
	return os.ReadFile(p)
}

// gitRealPath is where the sandbox shows the real git binary, for the
// wrapper that replaces it (gitWrapperMounts).
const gitRealPath = "/tmp/.toolgate-git/git"

// gitUnsetVars are variables the git wrapper removes before git runs:
// each names a program git would run (an external diff, ssh) or a place
// it would load programs or hooks from.
var gitUnsetVars = []string{"GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_SSH_VARIANT", "SSH_ASKPASS", "GIT_EXEC_PATH",
	"GIT_TEMPLATE_DIR", "GIT_CONFIG", "GIT_CONFIG_SYSTEM"}

// gitBinaries finds git's binary in PATH and the one in its exec path
// (where git runs its subcommands from, and where git-<cmd> links to it),
// resolved; either may be empty.
var gitBinaries = sync.OnceValues(func() (inPath, inExecPath string) {
	p, err := exec.LookPath("git")
	if err != nil {
		return "", ""
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		inPath = r
	}
	out, err := exec.Command(p, "--exec-path").Output()
	if err == nil {
		e := filepath.Join(strings.TrimSpace(string(out)), "git")
		if r, err := filepath.EvalSymlinks(e); err == nil {
			if fi, err := os.Stat(r); err == nil && fi.Mode().IsRegular() {
				inExecPath = r
			}
		}
	}
	return inPath, inExecPath
})

// gitWrapper is the script that replaces git inside the sandbox (in PATH
// and in its exec path, so git-<cmd> links and git's own subcommands too):
// it sets env (gitEnv) and removes gitUnsetVars before it runs the real
// git, shown at gitRealPath, so that a command that empties its
// environment (env -i, unset) or names its own external diff still runs
// git neutralised. Empty when there is no git.
func gitWrapper(env map[string]string) []byte {
	inPath, inExecPath := gitBinaries()
	if inPath == "" && inExecPath == "" {
		return nil
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# toolgate: git runs with its program-running configuration neutralised.\n")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s; export %s\n", k, shQuote(env[k]), k)
	}
	b.WriteString("unset " + strings.Join(gitUnsetVars, " ") + "\n")
	// git-<cmd> (a link to git) is git <cmd>.
	fmt.Fprintf(&b, "case \"${0##*/}\" in\ngit-*) n=\"${0##*/}\"; exec %s \"${n#git-}\" \"$@\" ;;\nesac\nexec %s \"$@\"\n", gitRealPath, gitRealPath)
	return []byte(b.String())
}

// gitWrapperMounts are the bwrap arguments that show the real git at
// gitRealPath and the wrapper (gitWrapper, bound from a pipe by data)
// over git in PATH and in its exec path.
func gitWrapperMounts(wrapper []byte, data func([]byte) (string, error)) ([]string, error) {
	inPath, inExecPath := gitBinaries()
	real := inExecPath
	if real == "" {
		real = inPath
	}
	if real == "" || len(wrapper) == 0 {
		return nil, nil
	}
	args := []string{"--perms", "0755", "--dir", filepath.Dir(gitRealPath), "--ro-bind", real, gitRealPath}
	for _, p := range []string{inPath, inExecPath} {
		if p != "" && !slices.Contains(args, p) {
			fd, err := data(wrapper)
			if err != nil {
				return nil, err
			}
			args = append(args, "--perms", "0555", "--ro-bind-data", fd, p)
		}
	}
	return args, nil
}

// shQuote quotes s for sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
