package shell

import (
	"strings"
)

// HazardRead: program text names a file to read that is not an argument
// (sed r, awk getline < file), so path rules cannot judge it.
const HazardRead HazardKind = "reads"

// sedHazards judges sed's options and every script it is given.
func sedHazards(cmd *Command) {
	args := cmd.Args[1:]
	var scripts []string
	explicit, sandbox, inPlace, dd := false, false, false, false
	var operands []Word
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.Value
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i].Value
			}
			return ""
		}
		switch {
		case !a.Literal:
			continue
		case dd || v == "-" || !strings.HasPrefix(v, "-"):
			operands = append(operands, a)
		case v == "--":
			dd = true
		case strings.HasPrefix(v, "--"):
			name, val, has := strings.Cut(v[2:], "=")
			switch name {
			case "expression":
				if !has {
					val = next()
				}
				scripts, explicit = append(scripts, val), true
			case "file":
				if !has {
					next()
				}
				explicit = true
				cmd.hazard(HazardScript, "sed -f runs a script file whose content is not analysed")
			case "in-place":
				inPlace = true
			case "line-length":
				if !has {
					next()
				}
			case "sandbox":
				sandbox = true
			}
		default:
		cluster:
			for j := 1; j < len(v); j++ {
				switch v[j] {
				case 'e':
					val := v[j+1:]
					if val == "" {
						val = next()
					}
					scripts, explicit = append(scripts, val), true
					break cluster
				case 'f':
					if v[j+1:] == "" {
						next()
					}
					explicit = true
					cmd.hazard(HazardScript, "sed -f runs a script file whose content is not analysed")
					break cluster
				case 'i':
					inPlace = true
					break cluster
				case 'l':
					if v[j+1:] == "" {
						next()
					}
					break cluster
				}
			}
		}
	}
	if !explicit && len(operands) > 0 {
		scripts = append(scripts, operands[0].Value)
		operands = operands[1:]
	}
	if inPlace {
		cmd.hazard(HazardWrite, "sed -i rewrites files")
	}
	if !sandbox {
		for _, s := range scripts {
			if k, d := sedScript(s); k != "" {
				cmd.hazard(k, d)
			}
		}
	}
	cmd.Paths = append(cmd.Paths, pathArgs(operands, inPlace)...)
}

// sedScript returns the first hazard of a sed script: commands e, w, W, r,
// R and the s flags e and w; anything it cannot parse is a hazard too.
func sedScript(s string) (HazardKind, string) {
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == ';') {
			i++
		}
	}
	// delimited reads up to the unescaped delimiter d, returning false at the end.
	delimited := func(d byte) bool {
		for i < len(s) {
			c := s[i]
			if c == '\\' {
				i += 2
				continue
			}
			if c == '\n' && d != '\n' {
				return false
			}
			i++
			if c == d {
				return true
			}
		}
		return false
	}
	address := func() bool {
		switch {
		case i < len(s) && s[i] >= '0' && s[i] <= '9':
			for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '~') {
				i++
			}
		case i < len(s) && s[i] == '$':
			i++
		case i < len(s) && s[i] == '/':
			i++
			if !delimited('/') {
				return false
			}
			for i < len(s) && (s[i] == 'I' || s[i] == 'M') {
				i++
			}
		case i+1 < len(s) && s[i] == '\\':
			d := s[i+1]
			i += 2
			if !delimited(d) {
				return false
			}
			for i < len(s) && (s[i] == 'I' || s[i] == 'M') {
				i++
			}
		}
		return true
	}
	toEOL := func() {
		for i < len(s) && s[i] != '\n' {
			if s[i] == '\\' {
				i++
			}
			i++
		}
	}
	toLabelEnd := func() {
		for i < len(s) && s[i] != '\n' && s[i] != ';' && s[i] != '}' {
			i++
		}
	}
	for {
		skipSpace()
		if i >= len(s) {
			return "", ""
		}
		if !address() {
			return HazardUnsupported, "sed script cannot be parsed"
		}
		if i < len(s) && s[i] == ',' {
			i++
			if i < len(s) && (s[i] == '+' || s[i] == '~') {
				i++
			}
			if !address() {
				return HazardUnsupported, "sed script cannot be parsed"
			}
		}
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '!') {
			i++
		}
		if i >= len(s) {
			return HazardUnsupported, "sed address without a command"
		}
		c := s[i]
		i++
		switch c {
		case '{', '}':
		case '#':
			toEOL()
		case ':', 'b', 't', 'T':
			toLabelEnd()
		case 'a', 'i', 'c':
			toEOL()
		case 'r', 'R':
			return HazardRead, "sed " + string(c) + " reads a file named in the script"
		case 'w', 'W':
			return HazardWrite, "sed " + string(c) + " writes a file"
		case 'e':
			return HazardExec, "sed e runs a command"
		case 'v':
			toLabelEnd()
		case 'q', 'Q', 'l', 'L':
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
		case 'd', 'D', 'g', 'G', 'h', 'H', 'n', 'N', 'p', 'P', 'x', 'z', '=', 'F':
		case 'y', 's':
			if i >= len(s) || s[i] == '\n' || s[i] == '\\' {
				return HazardUnsupported, "sed " + string(c) + " with an unusual delimiter"
			}
			d := s[i]
			i++
			// Two delimited parts: the pattern, then the replacement.
			for part := 0; part < 2; part++ {
				if !delimited(d) {
					return HazardUnsupported, "sed " + string(c) + " command cannot be parsed"
				}
			}
			if c == 'y' {
				break
			}
		flags:
			for i < len(s) {
				switch f := s[i]; {
				case f == 'e':
					return HazardExec, "sed s///e runs the pattern space as a command"
				case f == 'w':
					return HazardWrite, "sed s///w writes a file"
				case f == 'g' || f == 'p' || f == 'i' || f == 'I' || f == 'm' || f == 'M' || (f >= '0' && f <= '9'):
					i++
				case f == ';' || f == '\n' || f == '}' || f == ' ' || f == '\t':
					break flags
				default:
					return HazardUnsupported, "sed s flag " + string(f) + " is not understood"
				}
			}
		default:
			return HazardUnsupported, "sed command " + string(c) + " is not understood"
		}
	}
}

// awkHazards judges awk's options and program text.
func awkHazards(cmd *Command) {
	args := cmd.Args[1:]
	var program []string
	explicit := false
	var operands []Word
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.Value
		if !a.Literal {
			continue
		}
		if v == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(v, "-") || v == "-" {
			operands = append(operands, a)
			continue
		}
		name, val, has := strings.Cut(strings.TrimLeft(v, "-"), "=")
		if name == "" {
			continue
		}
		long := strings.HasPrefix(v, "--")
		key := name
		if !long {
			key = name[:1]
			if len(name) > 1 {
				val, has = name[1:], true
			}
		}
		takeVal := func() string {
			if has {
				return val
			}
			if i+1 < len(args) {
				i++
				return args[i].Value
			}
			return ""
		}
		switch key {
		case "f", "file", "E", "exec", "i", "include":
			takeVal()
			explicit = true
			cmd.hazard(HazardScript, "awk "+v+" runs a program file whose content is not analysed")
		case "l", "load":
			takeVal()
			cmd.hazard(HazardExec, "awk -l loads a shared library")
		case "e", "source":
			program, explicit = append(program, takeVal()), true
		case "F", "v", "field-separator", "assign":
			takeVal()
		case "W":
			if w := takeVal(); strings.HasPrefix(w, "exec") || strings.HasPrefix(w, "e") {
				cmd.hazard(HazardScript, "awk -W exec runs a program file")
			}
		}
	}
	if !explicit && len(operands) > 0 {
		program = append(program, operands[0].Value)
		operands = operands[1:]
	}
	for _, p := range program {
		switch {
		case strings.Contains(p, "system"):
			cmd.hazard(HazardExec, "awk system() runs a command")
		case strings.ContainsAny(p, "|@"):
			cmd.hazard(HazardExec, "awk pipes and indirect calls run commands")
		case strings.Contains(p, "getline"):
			cmd.hazard(HazardRead, "awk getline reads files or commands named in the program")
		case awkRedirects(p):
			cmd.hazard(HazardWrite, "awk print > file writes a file")
		}
	}
	cmd.Paths = append(cmd.Paths, pathArgs(operands, false)...)
}

// awkRedirects reports a '>' that is not part of '>='. Comparisons such as
// $3 > 5 are reported too: the analyser does not tell them from print > file.
func awkRedirects(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '>' && (i+1 >= len(p) || p[i+1] != '=') {
			return true
		}
	}
	return false
}

// gitHazards judges git's global options and the options of its subcommand.
func (w *walker) gitHazards(cmd *Command) {
	args := cmd.Args
	i := 1
	for i < len(args) {
		a := args[i]
		v := a.Value
		if !a.Literal || !strings.HasPrefix(v, "-") {
			break
		}
		switch {
		case v == "-c" || v == "--config-env" || strings.HasPrefix(v, "--config-env="):
			cmd.hazard(HazardExec, "git "+v+" sets configuration (core.pager, core.fsmonitor, ...) that runs programs")
			if !strings.Contains(v, "=") {
				i++
			}
		case strings.HasPrefix(v, "-c"):
			cmd.hazard(HazardExec, "git -c sets configuration that runs programs")
		case strings.HasPrefix(v, "--exec-path="):
			cmd.hazard(HazardExec, "git --exec-path runs git commands from another directory")
		case v == "-C":
			if i+1 < len(args) {
				w.a.s.Dirs = append(w.a.s.Dirs, args[i+1])
				i++
			}
		case v == "--git-dir" || v == "--work-tree" || v == "--namespace" || v == "--super-prefix":
			if v == "--git-dir" || v == "--work-tree" {
				cmd.hazard(HazardExec, "git "+v+" selects a repository whose configuration (core.fsmonitor, core.pager) runs programs")
			}
			if i+1 < len(args) {
				cmd.Paths = append(cmd.Paths, PathArg{Path: args[i+1].Value, Tilde: args[i+1].Tilde})
				i++
			}
		case strings.HasPrefix(v, "--git-dir=") || strings.HasPrefix(v, "--work-tree="):
			name, val, _ := strings.Cut(v, "=")
			cmd.hazard(HazardExec, "git "+name+" selects a repository whose configuration (core.fsmonitor, core.pager) runs programs")
			cmd.Paths = append(cmd.Paths, PathArg{Path: val, Tilde: strings.HasPrefix(val, "~")})
		}
		i++
	}
	if i >= len(args) {
		return
	}
	sub := args[i].Value
	rest := args[i+1:]
	for _, a := range rest {
		v := a.Value
		n := longName(v)
		switch {
		case n == "output":
			cmd.hazard(HazardWrite, "git --output writes a file")
		case n == "no-index":
			cmd.hazard(HazardRead, "git diff --no-index compares files outside the repository")
		case n == "ext-diff":
			cmd.hazard(HazardExec, "git --ext-diff runs an external diff program")
		case n == "open-files-in-pager" || (sub == "grep" && strings.HasPrefix(v, "-O")):
			cmd.hazard(HazardExec, "git grep -O runs a pager program")
		case n == "upload-pack" || n == "receive-pack" || n == "exec" || n == "template":
			cmd.hazard(HazardExec, "git --"+n+" runs a program")
		case sub == "rebase" && (v == "-x" || strings.HasPrefix(v, "-x")):
			cmd.hazard(HazardExec, "git rebase -x runs a command")
		case (sub == "clone" || sub == "submodule") && (v == "-c" || n == "config"):
			cmd.hazard(HazardExec, "git clone -c sets configuration that runs programs")
		}
	}
	cmd.Paths = append(cmd.Paths, pathArgs(rest, false)...)
}
