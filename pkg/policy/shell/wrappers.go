package shell

import (
	"path"
	"strings"
)

// wrapperSpec describes the command line of a program that runs another
// program: which options take a value, and what comes before the command.
type wrapperSpec struct {
	shortVal   string   // short options that take a value (-n 5, -n5)
	shortRest  string   // short options whose value is the rest of the cluster only (xargs -i{})
	longVal    []string // long options that take a value (--signal KILL, --signal=KILL)
	dirOpt     string   // short option whose value is a directory the command runs in
	dirLong    string   // long form of dirOpt
	fileOpt    string   // short option whose value is a file the wrapper writes
	fileLong   string   // long form of fileOpt
	hazShort   string   // short options that make the command unknowable
	hazLong    []string // long forms of hazShort
	haz        HazardKind
	hazDetail  string
	noCmdShort string   // short options meaning no command runs (command -v)
	fixed      int      // operands before the command (timeout DURATION)
	assigns    bool     // NAME=VALUE operands before the command (env)
	digitOpt   bool     // -N numeric option (nice -10)
	stdinArgs  bool     // the command's arguments come from stdin (xargs)
	opaque     bool     // the wrapper is judged as a command in its own right (sudo)
	longFlags  []string // long options without a value
	exactLong  bool     // long options are taken exactly, not by unique prefix
}

// resolveLong finds the long option name (or a unique prefix of it, as
// getopt_long does) among the wrapper's options; ok is false for an
// unknown or ambiguous name.
func (s *wrapperSpec) resolveLong(name string) (string, bool) {
	all := make([]string, 0, len(s.longVal)+len(s.hazLong)+len(s.longFlags))
	all = append(append(append(all, s.longVal...), s.hazLong...), s.longFlags...)
	match := ""
	for _, n := range all {
		if n == name {
			return n, true
		}
		if !s.exactLong && strings.HasPrefix(n, name) && name != "" {
			if match != "" && match != n {
				return "", false
			}
			match = n
		}
	}
	return match, match != ""
}

var wrappers = map[string]wrapperSpec{
	"env": {shortVal: "uCS", longVal: []string{"unset", "chdir", "split-string"}, dirOpt: "C", dirLong: "chdir",
		hazShort: "S", hazLong: []string{"split-string"}, haz: HazardScript, hazDetail: "env -S splits a string into a command", assigns: true,
		longFlags: []string{"ignore-environment", "null", "debug", "help", "version", "default-signal", "ignore-signal", "block-signal", "list-signal-handling"}},
	"nice":    {shortVal: "n", longVal: []string{"adjustment"}, digitOpt: true, longFlags: []string{"help", "version"}},
	"nohup":   {longFlags: []string{"help", "version"}},
	"timeout": {shortVal: "sk", longVal: []string{"signal", "kill-after"}, fixed: 1, longFlags: []string{"preserve-status", "foreground", "verbose", "help", "version"}},
	"time":    {shortVal: "fo", longVal: []string{"format", "output"}, fileOpt: "o", fileLong: "output", longFlags: []string{"append", "portability", "verbose", "quiet", "help", "version"}},
	"stdbuf":  {shortVal: "ioe", longVal: []string{"input", "output", "error"}, longFlags: []string{"help", "version"}},
	"setsid":  {longFlags: []string{"ctty", "fork", "wait", "help", "version"}},
	"xargs": {shortVal: "EIdLnPsa", shortRest: "ile", longVal: []string{"max-args", "max-procs", "max-chars", "delimiter", "arg-file", "process-slot-var"},
		stdinArgs: true, fileLong: "arg-file", longFlags: []string{"null", "exit", "interactive", "no-run-if-empty", "open-tty", "show-limits", "verbose", "replace", "eof", "max-lines", "help", "version"}},
	"sudo": {shortVal: "CDgpRrTtUu", longVal: []string{"user", "group", "chdir", "chroot", "prompt", "role", "type", "other-user", "close-from", "command-timeout", "host"},
		hazShort: "eis", hazLong: []string{"edit", "login", "shell"}, haz: HazardScript, hazDetail: "sudo runs a shell or an editor", opaque: true,
		dirOpt: "D", dirLong: "chdir", longFlags: []string{"askpass", "background", "bell", "preserve-env", "non-interactive", "preserve-groups", "remove-timestamp", "reset-timestamp", "list", "stdin", "validate", "version", "help"}},
	"doas":    {shortVal: "uC", hazShort: "s", haz: HazardScript, hazDetail: "doas -s runs a shell", opaque: true},
	"command": {noCmdShort: "vV"},
	"builtin": {},
	"exec":    {shortVal: "a"},
	"ionice":  {shortVal: "cnpPu", longVal: []string{"class", "classdata", "pid", "pgid", "uid"}},
	"taskset": {fixed: 1},
	"chrt":    {shortVal: "TPD", longVal: []string{"sched-runtime", "sched-period", "sched-deadline"}, fixed: 1},
	"flock": {shortVal: "wE", longVal: []string{"timeout", "conflict-exit-code"}, hazShort: "c", hazLong: []string{"command"},
		haz: HazardScript, hazDetail: "flock -c runs a string as a shell command", fixed: 1},
	"unbuffer": {},
	"chronic":  {},
}

// shellOptionHarmless reports whether a -o or -O option of a shell only
// makes a script stricter or louder.
func shellOptionHarmless(name string) bool {
	switch name {
	case "pipefail", "errexit", "nounset", "xtrace", "verbose", "noglob", "noclobber", "noexec", "nullglob", "failglob",
		"inherit_errexit", "posix":
		return true
	}
	return false
}

// shells are the shells whose -c string is parsed as bash.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "rbash": true}

// otherShells run strings in a syntax the analyser does not parse.
var otherShells = map[string]bool{"zsh": true, "ksh": true, "mksh": true, "ksh93": true, "fish": true, "csh": true, "tcsh": true,
	"pwsh": true, "powershell": true, "nu": true, "elvish": true, "xonsh": true, "yash": true, "posh": true, "oksh": true}

func (c *Command) hazard(k HazardKind, detail string) {
	c.Hazards = append(c.Hazards, Hazard{Kind: k, Detail: detail, Source: c.Source})
}

// hazardAt records a hazard driven by one part of the command: a word, an
// option, a name.
func (c *Command) hazardAt(k HazardKind, detail, part string) {
	c.Hazards = append(c.Hazards, Hazard{Kind: k, Detail: detail, Source: c.Source, Part: part})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// isAssignment reports whether s has the form NAME=VALUE.
func isAssignment(s string) bool {
	eq := strings.IndexByte(s, '=')
	if eq <= 0 {
		return false
	}
	for i := 0; i < eq; i++ {
		c := s[i]
		if !(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')) {
			return false
		}
	}
	return true
}

func (w *walker) unwrap(cmd *Command, spec wrapperSpec, base string, chain []string) {
	args := cmd.Args
	var assigns []Assign
	noCmd := false
	i := 1
	value := func(j int) (Word, int) {
		if j < len(args) {
			return args[j], j + 1
		}
		return Word{Literal: true}, j
	}
opts:
	for i < len(args) {
		a := args[i]
		if !a.Literal {
			if a.ProcSubst {
				break
			}
			cmd.hazard(HazardDynamic, base+": the command it runs is not known statically")
			return
		}
		v := a.Value
		switch {
		case v == "--":
			i++
			break opts
		case base == "env" && v == "-":
			cmd.hazardAt(HazardEnv, "env - empties the environment, removing settings later programs rely on", v)
			i++
		case spec.assigns && isAssignment(v):
			eq := strings.IndexByte(v, '=')
			assigns = append(assigns, Assign{Name: v[:eq], Value: v[eq+1:]})
			i++
		case strings.HasPrefix(v, "--") && len(v) > 2:
			name, val, hasVal := strings.Cut(v[2:], "=")
			i++
			if full, ok := spec.resolveLong(name); ok {
				name = full
				if base == "env" && name == "ignore-environment" {
					cmd.hazardAt(HazardEnv, "env -i empties the environment, removing settings later programs rely on", v)
				}
			} else if spec.opaque {
				continue
			} else {
				cmd.hazardAt(HazardUnsupported, base+": unknown or ambiguous option "+v+"; the analyser cannot tell what it does", v)
				continue
			}
			if contains(spec.hazLong, name) {
				cmd.hazard(spec.haz, spec.hazDetail)
			}
			if !hasVal && contains(spec.longVal, name) {
				var wv Word
				wv, i = value(i)
				val = wv.Value
				if !wv.Literal {
					cmd.hazard(HazardExpansion, base+" --"+name+" value is not known statically")
				}
			}
			if base == "env" && name == "unset" && !envSafe(val) {
				cmd.hazardAt(HazardEnv, "env --unset "+val+" removes a setting programs read", v)
			}
			if name != "" && name == spec.dirLong {
				w.dir(cmd, Word{Value: val, Literal: true, Tilde: strings.HasPrefix(val, "~")}, v)
			}
			if name != "" && name == spec.fileLong {
				cmd.Paths = append(cmd.Paths, PathArg{Path: val, Write: base == "time", Tilde: strings.HasPrefix(val, "~")})
			}
		case strings.HasPrefix(v, "-") && len(v) > 1:
			i++
			if spec.digitOpt && isDigits(v[1:]) {
				continue
			}
			for j := 1; j < len(v); j++ {
				c := v[j]
				if strings.IndexByte(spec.hazShort, c) >= 0 {
					cmd.hazard(spec.haz, spec.hazDetail)
				}
				if strings.IndexByte(spec.noCmdShort, c) >= 0 {
					noCmd = true
				}
				if base == "env" && c == 'i' {
					cmd.hazardAt(HazardEnv, "env -i empties the environment, removing settings later programs rely on", v)
				}
				if base == "exec" && c == 'c' {
					cmd.hazardAt(HazardEnv, "exec -c empties the environment, removing settings later programs rely on", v)
				}
				if base == "exec" && c == 'l' {
					cmd.hazardAt(HazardScript, "exec -l runs the program as a login shell, which reads startup files", v)
				}
				if strings.IndexByte(spec.shortRest, c) >= 0 {
					break
				}
				if strings.IndexByte(spec.shortVal, c) >= 0 {
					val := Word{Value: v[j+1:], Literal: true}
					if val.Value == "" {
						val, i = value(i)
					}
					if !val.Literal {
						cmd.hazard(HazardExpansion, base+" -"+string(c)+" value is not known statically")
					}
					if base == "env" && c == 'u' && !envSafe(val.Value) {
						cmd.hazardAt(HazardEnv, "env -u "+val.Value+" removes a setting programs read", v)
					}
					if base == "exec" && c == 'a' && (!val.Literal || strings.HasPrefix(val.Value, "-")) {
						cmd.hazardAt(HazardScript, "exec -a -NAME runs the program as a login shell, which reads startup files", v)
					}
					if base == "exec" && c == 'a' && val.Literal && path.Base(val.Value) == "sh" {
						// bash named sh runs in POSIX mode, whose parser
						// reads its string otherwise than bash's.
						cmd.hazardAt(HazardUnsupported, "exec -a sh runs a shell in another dialect than its name says", v)
					}
					if spec.dirOpt != "" && c == spec.dirOpt[0] {
						w.dir(cmd, val, v)
					}
					if spec.fileOpt != "" && c == spec.fileOpt[0] {
						cmd.Paths = append(cmd.Paths, PathArg{Path: val.Value, Write: true})
					}
					if base == "xargs" && c == 'a' {
						w.optPath(cmd, val, false)
					}
					break
				}
			}
		default:
			break opts
		}
	}
	for k := 0; k < spec.fixed && i < len(args); k++ {
		if base == "flock" {
			cmd.Paths = append(cmd.Paths, PathArg{Path: args[i].Value, Tilde: args[i].Tilde, Write: true})
		}
		i++
	}
	if noCmd || i >= len(args) {
		// Nothing is run (env alone prints the environment, command -v
		// looks a name up): judged as a command of its own.
		w.knowledge(cmd, base)
		return
	}
	cmd.Wrapper = !spec.opaque
	if spec.opaque {
		w.knowledge(cmd, base)
		cmd.Paths = nil
	}
	n := len(w.a.s.Commands)
	// Assignments reach the command run, through every wrapper.
	inherited := append(append([]Assign(nil), cmd.Assigns...), assigns...)
	w.simple(args[i:], inherited, cmd.Source, chain)
	if spec.stdinArgs && n < len(w.a.s.Commands) {
		w.a.s.Commands[n].hazard(HazardStdinArgs, base+" appends arguments read from stdin")
	}
}

// shell handles sh/bash: the -c string is parsed and analysed as a script
// of its own; a script file or stdin cannot be known.
func (w *walker) shell(cmd *Command, chain []string) {
	args := cmd.Args
	base := chain[len(chain)-1]
	cflag, posix := false, false
	i := 1
	harmless := func(j int) bool {
		return j < len(args) && args[j].Literal && shellOptionHarmless(args[j].Value)
	}
	for i < len(args) {
		a := args[i]
		if !a.Literal {
			cmd.hazard(HazardDynamic, base+": option or script not known statically")
			return
		}
		v := a.Value
		if v == "--" || v == "-" {
			i++
			break
		}
		if v == "" || (v[0] != '-' && v[0] != '+') {
			break
		}
		if strings.HasPrefix(v, "--") {
			// bash takes its long options exactly.
			switch v {
			case "--rcfile", "--init-file":
				cmd.hazardAt(HazardScript, base+" "+v+" runs a startup file", v)
				i += 2
				continue
			case "--login":
				cmd.hazardAt(HazardScript, base+" --login runs a login shell, which reads startup files (~/.profile, ...)", v)
			case "--debugger":
				cmd.hazardAt(HazardScript, base+" --debugger runs the debugger's startup file", v)
			case "--posix":
				posix = true
			case "--norc", "--noprofile", "--noediting", "--restricted", "--verbose", "--version", "--help",
				"--dump-strings", "--dump-po-strings", "--pretty-print":
			default:
				cmd.hazardAt(HazardUnsupported, base+": unknown option "+v+"; the analyser cannot tell what it does", v)
			}
			i++
			continue
		}
		i++
		for j := 1; j < len(v); j++ {
			switch c := v[j]; c {
			case 'c':
				if v[0] == '-' {
					cflag = true
				}
			case 'l':
				cmd.hazardAt(HazardScript, base+" "+v+" runs a login shell, which reads startup files (~/.profile, ...)", v)
			case 'i':
				cmd.hazardAt(HazardScript, base+" "+v+" runs an interactive shell, which reads startup files (~/.bashrc, $ENV) and runs PROMPT_COMMAND", v)
			case 's':
				cmd.hazardAt(HazardScript, base+" "+v+" reads commands from stdin", v)
			case 'o', 'O':
				// The option name is the next word.
				if v[0] == '-' && c == 'o' && i < len(args) && args[i].Literal && args[i].Value == "posix" {
					posix = true
				}
				if !harmless(i) {
					name := ""
					if i < len(args) {
						name = args[i].Value
					}
					cmd.hazardAt(HazardEval, base+" "+string(v[0])+string(c)+" "+name+" changes how the shell runs commands", v+" "+name)
				}
				i++
			case 'e', 'u', 'x', 'v', 'f', 'n', 'C', 'h', 'B', 'H', 'P', 'a', 'b', 'm', 'k', 'p', 'r', 't', 'T', 'E':
				// set options; -a exports every assignment, judged at the
				// assignments; -k and -p are judged below.
				if c == 'k' {
					cmd.hazardAt(HazardEnv, base+" -k treats assignments anywhere as environment", v)
				}
			case 'D':
			default:
				cmd.hazardAt(HazardUnsupported, base+": unknown option -"+string(c)+"; the analyser cannot tell what it does", v)
			}
		}
	}
	cmd.Wrapper = true
	if !cflag {
		if i < len(args) {
			cmd.hazard(HazardScript, base+" runs the script file "+args[i].Value+", whose content is not analysed")
		} else {
			cmd.hazard(HazardScript, base+" reads commands from stdin")
		}
		return
	}
	if i >= len(args) {
		cmd.hazard(HazardScript, base+" -c without a string runs nothing the analyser can judge")
		return
	}
	if !args[i].Literal {
		cmd.hazard(HazardExpansion, base+" -c string is not known statically")
		return
	}
	d := dialectOf(base)
	if posix {
		// bash --posix and bash -o posix parse their string as a POSIX
		// shell does.
		d = POSIX
	}
	w.nested(cmd, args[i], args[i].Value, d, chain)
}

// nested analyses a shell string a command runs (in the dialect of the
// shell that runs it) and renders word with its rendering. A string in
// which nothing is left to judge is a hazard, never an allow.
func (w *walker) nested(cmd *Command, word Word, src string, d Dialect, chain []string) {
	n := len(w.a.s.Commands)
	r, err := w.a.parseAs(src, w.depth+1, chain, d)
	if err != nil {
		if w.a.err == nil {
			w.a.err = err
		}
		return
	}
	if word.node != nil {
		w.repl[word.node] = r
	} else if r != src {
		cmd.hazardAt(HazardUnsupported, "the shell string cannot be rendered as it was judged", src)
	}
	if len(w.a.s.Commands) == n {
		cmd.hazardAt(HazardScript, "the shell string runs no command the analyser can judge", src)
	}
}

// find judges its own expression and unwraps -exec, -execdir, -ok, -okdir.
func (w *walker) find(cmd *Command, chain []string) {
	args := cmd.Args
	i := 1
	// Leading options.
	for i < len(args) && args[i].Literal {
		v := args[i].Value
		if v == "-H" || v == "-P" {
			i++
			continue
		}
		if v == "-L" {
			cmd.hazard(HazardFollow, "find -L follows symbolic links out of the tree")
			i++
			continue
		}
		if v == "-D" {
			i += 2
			continue
		}
		if strings.HasPrefix(v, "-O") {
			i++
			continue
		}
		break
	}
	// Start points.
	for i < len(args) {
		a := args[i]
		if a.Literal && (strings.HasPrefix(a.Value, "-") || a.Value == "(" || a.Value == "!" || a.Value == ",") {
			break
		}
		if a.Literal {
			cmd.Paths = append(cmd.Paths, PathArg{Path: a.Value, Tilde: a.Tilde})
		}
		i++
	}
	for i < len(args) {
		v := args[i].Value
		switch v {
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && !(args[j].Literal && (args[j].Value == ";" || args[j].Value == "+")) {
				j++
			}
			if inner := args[i+1 : j]; len(inner) > 0 {
				for _, a := range inner {
					if a.Literal && a.Value != "{}" && strings.Contains(a.Value, "{}") {
						// find fills each name into the text: in an sh -c
						// string or an awk program, a name carrying
						// quotes becomes code.
						cmd.hazardAt(HazardExec, "find "+v+" fills file names into the text of "+a.Value+", where a name can be code", a.Value)
					}
				}
				w.simple(inner, nil, cmd.Source, chain)
			}
			i = j + 1
		case "-delete":
			cmd.hazard(HazardWrite, "find -delete removes files")
			i++
		case "-fprint", "-fprint0", "-fls":
			cmd.hazard(HazardWrite, "find "+v+" writes a file")
			i += 2
		case "-fprintf":
			cmd.hazard(HazardWrite, "find -fprintf writes a file")
			i += 3
		case "-follow":
			cmd.hazard(HazardFollow, "find -follow follows symbolic links out of the tree")
			i++
		case "-files0-from":
			// The start points come from a file or stdin: no rule sees them.
			cmd.hazardAt(HazardRead, "find -files0-from walks start points a list names, which no rule sees", v)
			if i+1 < len(args) {
				cmd.Paths = append(cmd.Paths, PathArg{Path: args[i+1].Value, Tilde: args[i+1].Tilde})
			}
			i += 2
		case "-newer", "-anewer", "-cnewer", "-samefile":
			if i+1 < len(args) {
				cmd.Paths = append(cmd.Paths, PathArg{Path: args[i+1].Value, Tilde: args[i+1].Tilde})
			}
			i += 2
		default:
			if strings.HasPrefix(v, "-newer") && len(v) == 8 && i+1 < len(args) {
				cmd.Paths = append(cmd.Paths, PathArg{Path: args[i+1].Value, Tilde: args[i+1].Tilde})
				i += 2
				continue
			}
			i++
		}
	}
}

// watch runs its arguments joined by spaces through sh -c (or directly
// with -x).
func (w *walker) watch(cmd *Command, chain []string) {
	args := cmd.Args
	i, direct := 1, false
	for i < len(args) && args[i].Literal && strings.HasPrefix(args[i].Value, "-") {
		v := args[i].Value
		i++
		if v == "--" {
			break
		}
		switch v {
		case "-x", "--exec":
			direct = true
		case "-n", "--interval", "-q", "--equexit":
			i++
		}
	}
	cmd.Wrapper = true
	if i >= len(args) {
		return
	}
	if direct {
		w.simple(args[i:], nil, cmd.Source, chain)
		return
	}
	parts := make([]string, 0, len(args)-i)
	for _, a := range args[i:] {
		if !a.Literal {
			cmd.hazard(HazardExpansion, "watch command is not known statically")
			return
		}
		parts = append(parts, a.Value)
	}
	word := Word{}
	if len(parts) == 1 {
		word = args[i]
	}
	// watch runs the words joined through sh -c.
	w.nested(cmd, word, strings.Join(parts, " "), POSIX, chain)
}
