package shell

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// defaultPath is PATH when the worker has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultLang is LANG when the worker has none.
const defaultLang = "C.UTF-8"

var (
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// secretName matches names that look like they hold a credential.
	secretName = regexp.MustCompile(`(?i)key|secret|token|passw|passphrase|credential|auth|private|cookie`)
	// loaderPrefixes are variables that change what a program loads or
	// how bash and git behave before the command's first word runs.
	loaderPrefixes = []string{"LD_", "GIT_", "DYLD_", "BASH_FUNC_"}
	shellVars      = []string{"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLOBIGNORE", "HOME"}
)

// checkEnvName refuses a variable Config.Env may not set.
func checkEnvName(name string) error {
	switch {
	case !envName.MatchString(name):
		return fmt.Errorf("%q is not a variable name", name)
	case slices.Contains(shellVars, strings.ToUpper(name)):
		return fmt.Errorf("%s may not be set: it changes how bash runs the command (HOME is always the workspace)", name)
	case secretName.MatchString(name):
		return fmt.Errorf("%s looks like a secret; commands never get secrets in their environment", name)
	}
	for _, p := range loaderPrefixes {
		if strings.HasPrefix(strings.ToUpper(name), p) {
			return fmt.Errorf("%s may not be set: no %s* variables reach commands", name, p)
		}
	}
	return nil
}

// environ is a command's whole environment, an explicit allowlist:
// PATH (the worker's, without relative entries) and LANG from the worker,
// HOME set to the workspace, and the operator's extra variables. Nothing
// else of the worker's environment reaches the command.
func environ(ws string, extra map[string]string, getenv func(string) string) []string {
	path := cleanPath(getenv("PATH"))
	lang := getenv("LANG")
	if lang == "" || strings.ContainsAny(lang, "/\x00") {
		lang = defaultLang
	}
	env := map[string]string{"PATH": path, "LANG": lang, "HOME": ws}
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
