package shell

import (
	"path"
	"regexp"
	"strings"
	"sync"
)

// evalBuiltins run strings as code or change what names mean.
var evalBuiltins = map[string]string{
	"eval":     "eval runs a string as code",
	"source":   "source runs a file as code",
	".":        ". runs a file as code",
	"alias":    "alias changes what command names mean",
	"trap":     "trap runs a string as code on a signal or exit",
	"enable":   "enable loads or disables builtins",
	"hash":     "hash can map a command name to any file",
	"fc":       "fc re-runs commands from history",
	"shopt":    "shopt changes how the shell parses and expands",
	"compgen":  "compgen can run commands and functions",
	"complete": "complete can run commands and functions",
	"bind":     "bind can run commands on key presses",
	"history":  "history can read and replay command files",
	"coproc":   "coproc runs a command asynchronously",
}

// responseFiles are the programs that read further arguments from a
// file named by an @FILE argument (libiberty's expandargv, javac and java's
// argument files): what it holds, options included, no rule sees.
var responseFiles = set("strings", "nm", "objdump", "readelf", "size", "addr2line", "c++filt", "ar", "ranlib", "strip",
	"objcopy", "elfedit", "gprof", "as", "ld", "ld.bfd", "ld.gold", "gcc", "g++", "cc", "c++", "cpp", "gfortran", "gccgo",
	"dlltool", "windres", "javac", "java", "clang", "clang++")

// jqModule finds jq's import and include directives, which read modules
// and data files (import "x" as $d; with a search path of the program's
// choosing). Compiled on first use.
var jqModule = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_$.])(import|include)([^A-Za-z0-9_]|$)`)
})

// writers write or remove the files named as their operands (and, to be
// safe, as their option values: cp -t DIR, curl -o FILE, unzip -d DIR).
var writers = map[string]bool{
	"tee": true, "touch": true, "mkdir": true, "rm": true, "rmdir": true, "truncate": true, "cp": true, "mv": true,
	"ln": true, "install": true, "shred": true, "chmod": true, "chown": true, "chgrp": true, "unlink": true, "mkfifo": true,
	"mknod": true, "patch": true, "split": true, "csplit": true, "rsync": true, "scp": true, "sftp": true, "unzip": true,
	"tar": true, "bsdtar": true, "cpio": true, "gzip": true, "gunzip": true, "bzip2": true,
	"bunzip2": true, "xz": true, "unxz": true, "zstd": true, "zip": true, "7z": true, "ar": true, "sponge": true,
}

// interpreters run inline code given with one of their options.
var interpreters = map[string]string{
	"python": "c", "python2": "c", "python3": "c", "pypy": "c", "pypy3": "c",
	"node": "ep", "nodejs": "ep", "deno": "", "bun": "e",
	"perl": "eE", "ruby": "e", "php": "r", "lua": "e", "luajit": "e", "tclsh": "", "Rscript": "e", "osascript": "e",
}

// goWriteFlags are the go build and go test flags whose value is a file
// (or, for outputdir, a directory) the command writes.
var goWriteFlags = set("o", "coverprofile", "cpuprofile", "memprofile", "blockprofile", "mutexprofile", "trace",
	"outputdir", "pkgdir", "fuzzcache")

// downloadWrites are, per downloader, its options whose value is a file
// it writes ("" for a short letter's long form unknown), those that name a
// directory it writes into, those that read a configuration or script,
// and the flags that make it write into the working directory.
var downloadWrites = map[string]struct {
	short, dirShort, scriptShort, cwdShort string
	long, dirLong, scriptLong, cwdLong     []string
}{
	"curl": {short: "oDc", scriptShort: "K", cwdShort: "OJ",
		long:       []string{"output", "dump-header", "cookie-jar", "trace", "trace-ascii", "stderr", "libcurl", "etag-save", "hsts", "alt-svc"},
		dirLong:    []string{"output-dir"},
		scriptLong: []string{"config"},
		cwdLong:    []string{"remote-name", "remote-name-all", "remote-header-name"}},
	"wget": {short: "Ooa", dirShort: "P", scriptShort: "ei",
		long:       []string{"output-document", "output-file", "append-output", "save-cookies", "warc-file", "rejected-log"},
		dirLong:    []string{"directory-prefix"},
		scriptLong: []string{"execute", "config", "input-file", "load-cookies"}},
}

// downloader judges where curl and wget write: their output options, and
// the working directory wget (or curl -O) saves into by default.
func (w *walker) downloader(cmd *Command, base string) {
	d := downloadWrites[base]
	args := cmd.Args[1:]
	explicit := false
	cwd := base == "wget"
	match := func(list []string, n string) bool {
		for _, l := range list {
			if strings.HasPrefix(l, n) && n != "" {
				return true
			}
		}
		return false
	}
	for i := 0; i < len(args); i++ {
		v := args[i].Value
		if !args[i].Literal || !strings.HasPrefix(v, "-") || v == "-" {
			continue
		}
		if v == "--" {
			break
		}
		next := func(attached string, has bool) Word {
			if has {
				return Word{Value: attached, Literal: true, Tilde: strings.HasPrefix(attached, "~")}
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return Word{Literal: true}
		}
		if strings.HasPrefix(v, "--") {
			n, val, has := strings.Cut(v[2:], "=")
			switch {
			case match(d.long, n):
				w.optPath(cmd, next(val, has), true)
				explicit = true
			case match(d.dirLong, n):
				w.optPath(cmd, next(val, has), true)
				explicit = true
			case match(d.scriptLong, n):
				cmd.hazardAt(HazardScript, base+" "+v+" reads commands or settings from a file or string", v)
				next(val, has)
			case match(d.cwdLong, n):
				cwd = true
			}
			continue
		}
		for j := 1; j < len(v); j++ {
			c := v[j]
			switch {
			case strings.IndexByte(d.short+d.dirShort, c) >= 0:
				w.optPath(cmd, next(v[j+1:], j+1 < len(v)), true)
				explicit = true
			case strings.IndexByte(d.scriptShort, c) >= 0:
				cmd.hazardAt(HazardScript, base+" -"+string(c)+" reads commands or settings from a file or string", v)
				next(v[j+1:], j+1 < len(v))
			case strings.IndexByte(d.cwdShort, c) >= 0:
				cwd = true
				continue
			default:
				continue
			}
			break
		}
	}
	if cwd && !explicit {
		// Saves under a name taken from the URL, in the working directory.
		cmd.Paths = append(cmd.Paths, PathArg{Path: ".", Write: true})
	}
}

// npmDangerous are npm configuration keys that run programs, load code or
// read configuration from elsewhere.
var npmDangerous = []string{"script-shell", "shell", "node-options", "userconfig", "globalconfig", "prefix", "cache",
	"init-module", "onload-script", "editor", "browser", "viewer", "git", "node-gyp", "call", "cwd", "dir",
	"workspace-root", "global", "registry", "rcfile", "config"}

// envHarmless are the environment variables a command may be given
// without a person's look: they change formatting, never what runs or
// what is read or written.
var envHarmless = set("LANG", "LANGUAGE", "TZ", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "COLUMNS", "LINES")

// envHarmlessFor are harmless variables of one program.
var envHarmlessFor = map[string]map[string]bool{
	"go":  set("GOOS", "GOARCH", "GOARM", "GOAMD64", "GO386", "CGO_ENABLED"),
	"git": set("GIT_TERMINAL_PROMPT"),
}

// envSafe reports whether name may be set in any program's environment
// without changing what the program runs or where it reaches. Programs
// read lower-case settings too (npm_config_script_shell, http_proxy), so
// only the names listed are safe.
func envSafe(name string) bool {
	return envHarmless[name] || strings.HasPrefix(name, "LC_")
}

// envSafeFor reports whether name may be set for the program base.
func envSafeFor(base, name string) bool {
	return envSafe(name) || envHarmlessFor[base][name]
}

// shellVarSafe reports whether a shell variable may be assigned without
// exporting it: a lower-case name that is not a setting programs are
// known to read from an inherited environment. Upper-case names (PATH,
// IFS, PS4, BASH_ENV, GIT_*, ...) change what the shell or later programs
// do.
func shellVarSafe(name string) bool {
	if envSafe(name) {
		return true
	}
	if name == "" || strings.HasSuffix(name, "_proxy") || strings.HasPrefix(name, "npm_") || strings.HasPrefix(name, "yarn_") ||
		strings.HasPrefix(name, "pnpm_") {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return true
}

// shortCluster returns the letters of a single-dash option cluster
// (-rnL → "rnL"), stopping at the first non-letter; "" for other words.
func shortCluster(v string) string {
	if len(v) < 2 || v[0] != '-' || v[1] == '-' {
		return ""
	}
	j := 1
	for j < len(v) && ((v[j] >= 'a' && v[j] <= 'z') || (v[j] >= 'A' && v[j] <= 'Z')) {
		j++
	}
	return v[1:j]
}

func longName(v string) string {
	if !strings.HasPrefix(v, "--") {
		return ""
	}
	n, _, _ := strings.Cut(v[2:], "=")
	return n
}

// knowledge adds what is known of a program: the arguments it may open,
// the options that make it run other programs or write, and directories
// it runs in.
func (w *walker) knowledge(cmd *Command, base string) {
	if d, ok := evalBuiltins[base]; ok {
		cmd.hazard(HazardEval, d)
	}
	if nameBuiltins[base] {
		w.judgeNames(cmd, base)
	}
	if otherShells[base] {
		cmd.hazard(HazardScript, base+" runs code in a syntax the analyser does not parse")
	}
	args := cmd.Args
	if responseFiles[base] {
		for _, a := range args[1:] {
			if strings.HasPrefix(a.Value, "@") && len(a.Value) > 1 {
				cmd.hazardAt(HazardRead, base+" reads more arguments from the file "+a.Value[1:]+", which no rule sees", a.Value)
				break
			}
		}
	}
	if s, ok := optionSpecs[base]; ok {
		w.specified(cmd, base, s)
		return
	}
	switch base {
	case "eval":
		// A literal eval string is analysed like sh -c (and stays a hazard).
		parts := make([]string, 0, len(args)-1)
		for _, a := range args[1:] {
			if !a.Literal {
				parts = nil
				break
			}
			parts = append(parts, a.Value)
		}
		if len(parts) > 0 {
			if err := w.a.parse(strings.Join(parts, " "), w.depth+1, append(append([]string(nil), cmd.WrappedBy...), "eval")); err != nil && w.a.err == nil {
				w.a.err = err
			}
		}
	case "set":
		setHazards(cmd)
	case "unset":
		// Removing a variable the sandbox sets (GIT_CONFIG_GLOBAL, ...)
		// undoes it for every later program.
		fn := false
		for _, a := range args[1:] {
			switch {
			case a.Value == "-f":
				fn = true
			case strings.HasPrefix(a.Value, "-"):
			case !fn && a.Literal && !shellVarSafe(a.Value):
				cmd.hazardAt(HazardEnv, "unset "+a.Value+" removes a setting later programs read", a.Value)
			}
		}
	case "mapfile", "readarray":
		for _, a := range args[1:] {
			if strings.Contains(shortCluster(a.Value), "C") {
				cmd.hazard(HazardEval, base+" -C runs a callback")
			}
		}
	case "cd", "pushd":
		var target *Word
		for i := 1; i < len(args); i++ {
			if args[i].Literal && strings.HasPrefix(args[i].Value, "-") && args[i].Value != "-" {
				if base == "cd" && args[i].Value != "--" && strings.Contains(args[i].Value, "L") {
					// The gate resolves .. as the kernel does; cd -L
					// removes it textually, past a symbolic link.
					cmd.hazardAt(HazardUnsupported, "cd -L resolves .. in the text, not as the kernel does", args[i].Value)
				}
				continue
			}
			target = &args[i]
			break
		}
		if target == nil {
			// cd alone goes home.
			w.a.s.Dirs = append(w.a.s.Dirs, Word{Value: "~", Literal: true, Tilde: true})
		} else if target.Literal && (target.Value == "-" || (base == "pushd" && (strings.HasPrefix(target.Value, "+") || strings.HasPrefix(target.Value, "-")))) {
			// cd - goes to $OLDPWD and pushd +N to an entry of the
			// directory stack, which the script may have set to anything.
			w.a.s.Dirs = append(w.a.s.Dirs, Word{Raw: target.Value})
		} else {
			w.a.s.Dirs = append(w.a.s.Dirs, *target)
		}
	case "git":
		w.gitHazards(cmd)
		return
	case "ninja":
		for i := 1; i < len(args); i++ {
			if v := args[i].Value; v == "-C" && i+1 < len(args) {
				w.dir(cmd, args[i+1], "-C "+args[i+1].Value)
			} else if strings.HasPrefix(v, "-C") && len(v) > 2 {
				w.dir(cmd, Word{Value: v[2:], Literal: true}, v)
			}
		}
	case "xxd":
		// xxd [options] [infile [outfile]]: options end at the first
		// operand, and whatever follows it (-r included) is the file it
		// writes.
		for i := 1; i < len(args); i++ {
			v := args[i].Value
			if args[i].Literal && strings.HasPrefix(v, "-") && v != "-" {
				if len(v) == 2 && strings.IndexByte("cglosnCR", v[1]) >= 0 {
					i++
				}
				continue
			}
			if i+1 < len(args) {
				cmd.hazardAt(HazardWrite, "xxd writes its second operand", args[i+1].Raw)
				cmd.Paths = append(cmd.Paths, pathArgs(args[i+1:i+2], true)...)
			}
			break
		}
	case "more", "most":
		for _, a := range args[1:] {
			if strings.HasPrefix(a.Value, "+") {
				cmd.hazardAt(HazardExec, base+" +command runs pager commands, which include shell escapes", a.Value)
			}
		}
	case "go":
		for i, a := range args[1:] {
			v := a.Value
			n := strings.TrimPrefix(v, "-")
			n, _, _ = strings.Cut(strings.TrimPrefix(n, "-"), "=")
			if strings.HasPrefix(v, "-") && (n == "toolexec" || n == "exec" || n == "vettool" || n == "overlay" || n == "compiler") {
				cmd.hazardAt(HazardExec, "go -"+n+" runs a program", v)
			}
			if wn := strings.TrimPrefix(n, "test."); strings.HasPrefix(v, "-") && goWriteFlags[wn] {
				// -o, -coverprofile, -cpuprofile, ...: the file it writes,
				// judged by the write rules (a hook, .git/config).
				if _, after, ok := strings.Cut(v, "="); ok {
					w.optPath(cmd, Word{Value: after, Literal: true, Tilde: strings.HasPrefix(after, "~")}, true)
				} else if i+2 < len(args) {
					w.optPath(cmd, args[i+2], true)
				}
			}
			if strings.HasPrefix(v, "-") && (n == "C" || n == "modfile") {
				val, has := "", false
				if _, after, ok := strings.Cut(v, "="); ok {
					val, has = after, true
				} else if i+2 < len(args) {
					val, has = args[i+2].Value, args[i+2].Literal
				}
				if !has {
					cmd.hazardAt(HazardExpansion, "go -"+n+" value is not known statically", v)
				} else if n == "C" {
					w.dir(cmd, Word{Value: val, Literal: true, Tilde: strings.HasPrefix(val, "~")}, v)
				}
			}
			if i == 0 && v == "env" {
				for _, b := range args[2:] {
					if b.Value == "-w" || b.Value == "-u" {
						cmd.hazard(HazardWrite, "go env -w writes the go configuration (GOFLAGS can run programs)")
					}
				}
			}
		}
	case "npm", "npx", "yarn", "pnpm", "pnpx":
		// npm takes any configuration key as an option, and unique
		// prefixes of it (--scr is --script-shell).
		for _, a := range args[1:] {
			v := a.Value
			if v == "-c" || v == "--call" {
				cmd.hazardAt(HazardExec, base+" -c runs a command string", v)
			}
			if !strings.HasPrefix(v, "--") || len(v) < 4 {
				continue
			}
			name, _, _ := strings.Cut(v[2:], "=")
			name = strings.TrimPrefix(name, "no-")
			for _, k := range npmDangerous {
				if strings.HasPrefix(k, name) {
					cmd.hazardAt(HazardExec, base+" "+v+" sets configuration ("+k+") that can run programs or read other files", v)
					break
				}
			}
		}
	case "wc", "du":
		for _, a := range args[1:] {
			if n := longName(a.Value); len(n) >= 3 && strings.HasPrefix("files0-from", n) {
				cmd.hazardAt(HazardRead, base+" --files0-from reads the files a list names, which no rule sees", a.Value)
			}
		}
	case "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum":
		for _, a := range args[1:] {
			if n := longName(a.Value); strings.Contains(shortCluster(a.Value), "c") || (len(n) >= 2 && strings.HasPrefix("check", n)) {
				cmd.hazardAt(HazardRead, base+" -c reads the files a list names, which no rule sees", a.Value)
			}
		}
	case "curl", "wget":
		w.downloader(cmd, base)
	case "cargo":
		// --config KEY=VALUE sets any configuration (build.rustc-wrapper,
		// target.*.runner) and -Z unstable ones: both can run programs.
		for _, a := range args[1:] {
			v := a.Value
			if n := longName(v); (len(n) >= 3 && strings.HasPrefix("config", n)) || strings.HasPrefix(v, "-Z") {
				cmd.hazardAt(HazardExec, "cargo "+v+" sets configuration that can run programs", v)
			}
		}
	case "file":
		for _, a := range args[1:] {
			if n := longName(a.Value); strings.Contains(shortCluster(a.Value), "f") || (len(n) >= 3 && strings.HasPrefix("files-from", n)) {
				cmd.hazardAt(HazardRead, "file -f reads the files a list names, which no rule sees", a.Value)
			}
		}
		for _, a := range args[1:] {
			v := a.Value
			if strings.Contains(shortCluster(v), "C") || (strings.HasPrefix(v, "--c") && strings.HasPrefix("compile", strings.TrimPrefix(v, "--"))) {
				cmd.hazardAt(HazardWrite, "file -C writes a compiled magic file", v)
			}
		}
	case "jq", "gojq", "jaq":
		for _, a := range args[1:] {
			v, c, n := a.Value, shortCluster(a.Value), longName(a.Value)
			switch {
			case strings.ContainsAny(c, "fL") || (len(n) >= 3 && (strings.HasPrefix("from-file", n) || strings.HasPrefix("library-path", n))):
				cmd.hazardAt(HazardRead, base+" "+v+" reads a program or modules from files whose content is not analysed", v)
			case jqModule().MatchString(v):
				cmd.hazardAt(HazardRead, base+" import and include read modules and data from a search path no rule sees", v)
			default:
				continue
			}
			break
		}
	case "yq":
		for _, a := range args[1:] {
			if strings.Contains(shortCluster(a.Value), "i") || longName(a.Value) == "inplace" {
				cmd.hazard(HazardWrite, "yq -i writes the file")
			}
		}
	case "rsync", "ssh", "scp", "sftp":
		// rsync -e/--rsh, scp and sftp -S name the program that carries
		// the connection; -F reads an ssh configuration, whose
		// ProxyCommand and LocalCommand run programs, as -o can set them.
		progShort := map[string]string{"rsync": "e", "scp": "SF", "sftp": "SF", "ssh": "F"}[base]
		for _, a := range args[1:] {
			v := a.Value
			n := longName(v)
			lower := strings.ToLower(v)
			switch {
			case base == "rsync" && len(n) >= 2 && (strings.HasPrefix("rsh", n) || strings.HasPrefix("rsync-path", n)):
				cmd.hazardAt(HazardExec, base+" "+v+" runs a program", v)
			case strings.Contains(lower, "proxycommand") || strings.Contains(lower, "localcommand") || strings.Contains(lower, "permitlocalcommand") ||
				strings.Contains(lower, "knownhostscommand") || strings.Contains(lower, "proxyjump") || strings.Contains(lower, "include"):
				cmd.hazardAt(HazardExec, base+" "+v+" sets an ssh option that runs a program", v)
			case shortCluster(v) != "" && strings.ContainsAny(shortCluster(v), progShort):
				cmd.hazardAt(HazardExec, base+" "+v+" names a program or configuration that runs programs", v)
			}
		}
	}
	if opts, ok := interpreters[base]; ok {
		for _, a := range args[1:] {
			c, n := shortCluster(a.Value), longName(a.Value)
			if (c != "" && strings.ContainsAny(c, opts) && opts != "") || n == "eval" || n == "print" {
				cmd.hazard(HazardExec, base+" runs inline code")
				break
			}
		}
	}
	cmd.Paths = append(cmd.Paths, pathArgs(args[1:], writers[base])...)
	cmd.Paths = append(cmd.Paths, archiverWrites(base, args[1:])...)
	if base == "ln" {
		if targets, relative := linkTargets(args[1:]); targets != nil {
			// A relative target is judged where the link resolves it,
			// not in the working directory.
			kept := cmd.Paths[:0]
			for _, p := range cmd.Paths {
				if !relative[p.Path] {
					kept = append(kept, p)
				}
			}
			cmd.Paths = append(kept, targets...)
		}
	}
	if base == "dd" {
		for i := range cmd.Paths {
			if strings.HasPrefix(cmd.Paths[i].Path, "of=") {
				cmd.Paths[i].Write = true
				if i+1 < len(cmd.Paths) && "of="+cmd.Paths[i+1].Path == cmd.Paths[i].Path {
					cmd.Paths[i+1].Write = true
				}
			}
		}
	}
}

func setHazards(cmd *Command) {
	args := cmd.Args[1:]
	for i := 0; i < len(args); i++ {
		v := args[i].Value
		if v == "--" || v == "" || (v[0] != '-' && v[0] != '+') {
			return // positional parameters
		}
		if v == "-o" || v == "+o" {
			if harmlessOption(args, i+1) {
				i++
				continue
			}
			cmd.hazard(HazardEval, "set -o changes how the shell runs commands")
			return
		}
		if strings.Trim(v[1:], "euxvfnCo") != "" {
			cmd.hazard(HazardEval, "set "+v+" changes how the shell runs commands")
			return
		}
		if strings.Contains(v[1:], "o") {
			// -euo pipefail: the option name follows.
			if harmlessOption(args, i+1) {
				i++
				continue
			}
			cmd.hazard(HazardEval, "set -o changes how the shell runs commands")
			return
		}
	}
}

// harmlessOption reports whether args[i] is a `set -o` option that only
// makes a script stricter or louder.
func harmlessOption(args []Word, i int) bool {
	if i >= len(args) {
		return false
	}
	switch args[i].Value {
	case "pipefail", "errexit", "nounset", "xtrace", "verbose", "noglob", "noclobber":
		return true
	}
	return false
}

// pathArgs extracts the arguments a program may open as files: operands,
// the values of --opt=VALUE, and values attached to short options when they
// look like paths.
func pathArgs(args []Word, write bool) []PathArg {
	var out []PathArg
	dd := false
	for _, a := range args {
		if !a.Literal {
			continue
		}
		v := a.Value
		switch {
		case dd || v == "-" || !strings.HasPrefix(v, "-"):
			if v == "" || v == "-" {
				continue
			}
			out = append(out, PathArg{Path: v, Tilde: a.Tilde, Write: write})
			if eq := strings.IndexByte(v, '='); eq > 0 && !dd {
				// name=value operands (dd if=..., awk var=...) and words bash
				// treats like assignments (tilde after =).
				val := v[eq+1:]
				out = append(out, PathArg{Path: val, Tilde: strings.HasPrefix(val, "~"), Write: write})
			}
		case v == "--":
			dd = true
		case strings.HasPrefix(v, "--"):
			if _, val, ok := strings.Cut(v, "="); ok && val != "" {
				out = append(out, PathArg{Path: val, Tilde: strings.HasPrefix(val, "~"), Write: write})
			}
		default:
			// -o/tmp/x, -I../inc: any suffix starting at / . or ~.
			for j := 2; j < len(v); j++ {
				if c := v[j]; c == '/' || c == '~' || (c == '.' && (v[j-1] < 'a' || v[j-1] > 'z')) || (c == '.' && j == 2) {
					val := v[j:]
					out = append(out, PathArg{Path: val, Tilde: c == '~', Write: write})
					break
				}
			}
		}
	}
	return out
}

// linkTargets are the places the relative targets of ln -s name, and the
// set of those targets as written. A symbolic link's target is resolved
// against the link's own directory, not the working directory, so each
// is judged there: against the link's parent, and against the link's
// path itself in case it names a directory the link is made in, or
// against -t's directory. nil when ln makes no symbolic link or its
// arguments are not all known.
func linkTargets(args []Word) ([]PathArg, map[string]bool) {
	symbolic, dir, ends := false, "", false
	var ops []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.Value
		switch {
		case !a.Literal || a.Tilde:
			return nil, nil
		case ends || v == "-" || !strings.HasPrefix(v, "-"):
			ops = append(ops, v)
		case v == "--":
			ends = true
		case strings.HasPrefix(v, "--"):
			name, val, hasVal := strings.Cut(v[2:], "=")
			switch {
			case strings.HasPrefix("symbolic", name) && len(name) >= 2:
				symbolic = true
			case strings.HasPrefix("target-directory", name) && len(name) >= 2:
				if !hasVal && i+1 < len(args) {
					i++
					val = args[i].Value
				}
				dir = val
			case strings.HasPrefix("suffix", name) && len(name) >= 2 && !hasVal:
				i++
			}
		default:
			for j := 1; j < len(v); j++ {
				switch v[j] {
				case 's':
					symbolic = true
				case 't', 'S':
					val := v[j+1:]
					if val == "" && i+1 < len(args) {
						i++
						val = args[i].Value
					}
					if v[j] == 't' {
						dir = val
					}
					j = len(v)
				}
			}
		}
	}
	if !symbolic {
		return nil, nil
	}
	out := []PathArg{}
	relative := map[string]bool{}
	add := func(base, target string) {
		if !path.IsAbs(target) {
			relative[target] = true
			out = append(out, PathArg{Path: path.Join(base, target), Write: true})
		}
	}
	switch {
	case dir != "":
		for _, t := range ops {
			add(dir, t)
			out = append(out, PathArg{Path: path.Join(dir, path.Base(t)), Write: true})
		}
	case len(ops) == 1:
		add(".", ops[0])
	default:
		last := ops[len(ops)-1]
		for _, t := range ops[:len(ops)-1] {
			if len(ops) == 2 {
				add(path.Dir(last), t)
			}
			add(last, t)
		}
	}
	return out, relative
}
