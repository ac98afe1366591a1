package shell

import (
	"strings"
)

// HazardRead: program text names a file to read that is not an argument
// (sed r, awk getline < file), so path rules cannot judge it.
const HazardRead HazardKind = "reads"

// sedProgram judges sed's scripts, given with -e or as the first operand,
// once its options have been judged.
func (w *walker) sedProgram(cmd *Command, p *parsedArgs) {
	var scripts, texts []string
	var known []bool
	for _, o := range p.opts {
		if o.def.id == "e" {
			scripts, texts, known = append(scripts, o.value.Value), append(texts, o.text), append(known, o.value.Literal)
		}
	}
	operands := p.operands
	if !p.has("e", "f") && len(operands) > 0 {
		scripts, texts, known = append(scripts, operands[0].Value), append(texts, operands[0].Raw), append(known, operands[0].Literal)
		operands = operands[1:]
	}
	if !p.has("sandbox") {
		for i, s := range scripts {
			if !known[i] {
				cmd.hazardAt(HazardExpansion, "sed script is not known statically", texts[i])
				continue
			}
			if k, d := sedScript(s); k != "" {
				cmd.hazardAt(k, d, texts[i])
			}
		}
	}
	cmd.Paths = append(cmd.Paths, pathArgs(operands, p.has("i"))...)
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

// awkProgram judges awk's program text, given with -e/--source or as the
// first operand, once its options have been judged. mawk's -W exec runs a
// program file.
func (w *walker) awkProgram(cmd *Command, p *parsedArgs) {
	var program []Word
	for _, o := range p.opts {
		switch o.def.id {
		case "e":
			v := o.value
			v.Raw = o.text
			program = append(program, v)
		case "W":
			// mawk reads -W's value as options separated by commas
			// (-W i,e=file), each abbreviated to a prefix.
			for _, v := range strings.Split(o.value.Value, ",") {
				if v = strings.TrimLeft(v, " "); !o.value.Literal || strings.HasPrefix(v, "e") || strings.HasPrefix(v, "d") {
					cmd.hazardAt(HazardScript, "awk -W exec runs a program file", o.text)
					break
				}
			}
		}
	}
	operands := p.operands
	if !p.has("e", "f", "E", "i") && len(operands) > 0 {
		program = append(program, operands[0])
		operands = operands[1:]
	}
	for _, a := range cmd.Args[1:] {
		if strings.Contains(a.Value, "ARGV") || strings.Contains(a.Value, "ARGC") {
			// The files awk reads are ARGV's elements, which the program
			// and -v or operand assignments may change.
			cmd.hazardAt(HazardRead, "awk ARGV and ARGC name the files it reads, which no rule sees once changed", a.Value)
			break
		}
	}
	for _, pw := range program {
		if !pw.Literal {
			cmd.hazardAt(HazardExpansion, "awk program is not known statically", pw.Value)
			continue
		}
		pr, part := pw.Value, pw.Raw
		if part == "" {
			part = pr
		}
		switch {
		case strings.Contains(pr, "system"):
			cmd.hazardAt(HazardExec, "awk system() runs a command", part)
		case strings.ContainsAny(pr, "|@"):
			cmd.hazardAt(HazardExec, "awk pipes and indirect calls run commands", part)
		case strings.Contains(pr, "getline"):
			cmd.hazardAt(HazardRead, "awk getline reads files or commands named in the program", part)
		case awkRedirects(pr):
			cmd.hazardAt(HazardWrite, "awk print > file writes a file", part)
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
	p := w.judgeOptions(cmd, gitGlobalSpec, cmd.Args[1:])
	for _, o := range p.opts {
		if (o.def.id == "git-dir" || o.def.id == "work-tree") && o.hasValue {
			w.optPath(cmd, o.value, false)
		}
	}
	if len(p.operands) == 0 {
		return
	}
	sub := p.operands[0].Value
	rest := p.operands[1:]
	for _, a := range rest {
		v := a.Value
		switch {
		case sub == "rebase" && strings.HasPrefix(v, "-x"):
			cmd.hazardAt(HazardExec, "git rebase -x runs a command", v)
		case (sub == "clone" || sub == "submodule") && v == "-c":
			cmd.hazardAt(HazardExec, "git clone -c sets configuration that runs programs", v)
		}
	}
	operands := gitSubcommandOptions(cmd, w, sub, rest)
	if c, _ := classifyGit(argvOf(cmd.Args[1:])); c == ReadOnly || gitWritesOut[sub] {
		why, paths := gitHistory(sub, rest)
		cmd.History = why
		cmd.Paths = append(cmd.Paths, paths...)
	}
	switch sub {
	case "verify-commit", "verify-tag":
		cmd.hazardAt(HazardExec, "git "+sub+" runs the signature program (gpg.program) repository configuration names", sub)
	case "init":
		cmd.hazardAt(HazardWrite, "git init writes repository configuration and hooks (it rewrites an existing repository's)", cmd.Source)
		cmd.Paths = append(cmd.Paths, pathArgs(operands, true)...)
		return
	case "clone":
		// The last operand is the directory it creates.
		if len(operands) >= 2 {
			cmd.Paths = append(cmd.Paths, pathArgs(operands[:len(operands)-1], false)...)
			cmd.Paths = append(cmd.Paths, pathArgs(operands[len(operands)-1:], true)...)
			return
		}
	}
	if sub == "config" {
		if c, _ := classifyGit(argvOf(cmd.Args[1:])); c != ReadOnly {
			cmd.hazardAt(HazardWrite, "git config changes configuration that later git commands run (core.hooksPath, core.fsmonitor, aliases, ...)", cmd.Source)
		}
	}
	cmd.Paths = append(cmd.Paths, pathArgs(operands, false)...)
}

// argvOf returns the values of words (unknown ones as "").
func argvOf(ws []Word) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		if w.Literal {
			out[i] = w.Value
		}
	}
	return out
}

// gitWritesOut are the git subcommands that write files out of the
// object store (not read-only, judged for their history too).
var gitWritesOut = set("archive", "bundle", "fast-export", "format-patch")
