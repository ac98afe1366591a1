package bash

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// defaultPath is PATH when the worker has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultLang is LANG when the worker has none.
const defaultLang = "C.UTF-8"

var (
	// envName is what a variable may be called; secretName matches names
	// that look like they hold a credential. Compiled on first use.
	envName    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	secretName = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)key|secret|token|passw|passphrase|credential|auth|private|cookie`)
	})
	// loaderPrefixes are variables that change what a program loads or
	// how bash and git behave before the command's first word runs.
	loaderPrefixes = []string{"LD_", "GIT_", "DYLD_", "BASH_FUNC_", "XDG_"}
	shellVars      = []string{"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLOBIGNORE", "HOME", "TMPDIR", "PAGER", "TERM"}
)

// checkEnvName refuses a variable Config.Env may not set.
func checkEnvName(name string) error {
	switch {
	case !envName().MatchString(name):
		return fmt.Errorf("%q is not a variable name", name)
	case slices.Contains(shellVars, strings.ToUpper(name)):
		return fmt.Errorf("%s may not be set: it changes how bash runs the command (HOME is always a fresh directory of the call's own)", name)
	case secretName().MatchString(name):
		return fmt.Errorf("%s looks like a secret; commands never get secrets in their environment", name)
	}
	for _, p := range loaderPrefixes {
		if strings.HasPrefix(strings.ToUpper(name), p) {
			return fmt.Errorf("%s may not be set: no %s* variables reach commands", name, p)
		}
	}
	return nil
}

// environ is the part of a command's environment fixed at start-up, an
// explicit allowlist: PATH (the worker's, without relative entries) and
// LANG from the worker, TERM=dumb, the operator's extra variables, and
// git's neutralisation (gitEnv). Nothing else of the worker's environment
// reaches the command; callEnv adds HOME and the directories under it.
func environ(ws string, extra map[string]string, getenv func(string) string) []string {
	path := cleanPath(getenv("PATH"))
	lang := getenv("LANG")
	if lang == "" || strings.ContainsAny(lang, "/\x00") {
		lang = defaultLang
	}
	env := map[string]string{"PATH": path, "LANG": lang, "TERM": "dumb"}
	for k, v := range extra {
		env[k] = v
	}
	for k, v := range gitEnv(ws) {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// callEnv is a call's whole environment: base (environ) plus HOME, a
// fresh empty directory of the call's own outside the workspace, the XDG
// directories under it, and TMPDIR. Programs read their configuration
// (shell start-up files, .gitconfig, .npmrc, pip.conf, .ssh/config,
// lesskey) from there, so none of it is the agent's to write.
func callEnv(base []string, home, tmp string) []string {
	env := slices.Clone(base)
	env = append(env,
		"HOME="+home,
		"XDG_CONFIG_HOME="+home+"/.config",
		"XDG_CACHE_HOME="+home+"/.cache",
		"XDG_DATA_HOME="+home+"/.local/share",
		"XDG_STATE_HOME="+home+"/.local/state",
		"TMPDIR="+tmp,
	)
	slices.Sort(env)
	return env
}

// cleanPath keeps the absolute entries of a PATH value, so that a command
// never runs a program from its current directory by accident.
func cleanPath(p string) string {
	var keep []string
	for _, dir := range filepath.SplitList(p) {
		if filepath.IsAbs(dir) && !slices.Contains(keep, dir) {
			keep = append(keep, dir)
		}
	}
	if len(keep) == 0 {
		return defaultPath
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}
