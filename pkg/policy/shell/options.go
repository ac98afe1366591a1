package shell

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// The option engine parses a program's argv the way its own parser does,
// so that what the analyser sees as an option is what the program sees:
//
//   - getopt_long (GNU coreutils, sed, grep, gawk, tar, util-linux): any
//     unambiguous prefix of a long option is that option (--outp is
//     --output), --opt=VALUE and --opt VALUE, clustered short options with
//     an attached value (-oFILE, -rnoFILE), -- ends the options, and
//     options may follow operands (permutation).
//   - exact long options (ripgrep, fd, git's global options): no prefixes.
//   - stop-at-operand (POSIX, env, xargs): the first operand ends the options.
//
// A program whose options matter has a table of every option it accepts:
// an option the table does not hold, or a prefix that could be more than
// one option, is a hazard (the program would reject it or the analyser
// would guess).

// argKind says whether an option takes a value.
type argKind int

const (
	argNone     argKind = iota
	argRequired         // -o FILE, -oFILE, --output FILE, --output=FILE
	argOptional         // -iSUFFIX, --in-place=SUFFIX, never a separate word
)

// effect is what an option does that the gate must judge.
type effect int

const (
	effNone    effect = iota
	effPath           // its value is a file the program reads
	effWrite          // its value is a file the program writes
	effInPlace        // the program rewrites its operands
	effExec           // it runs a program
	effScript         // it runs a script file the analyser does not see
	effFollow         // it follows symbolic links out of the tree
	effDir            // its value is a directory the program works in
	effSystem         // it changes the system
	effReads          // it reads files named elsewhere (program text)
	effWrites         // it writes files not named as its value
)

// optDef is one option: its names and what it does.
type optDef struct {
	id     string // canonical name, the first one listed
	names  []string
	arg    argKind
	effect effect
	detail string
}

// optSpec is how one program parses its options. Its table is built from
// the definitions on first use: most processes that link the analyser
// (a CLI command, a worker before its first bash call) never parse an
// option.
type optSpec struct {
	program string
	table   func() *optTable
}

// optTable is the options of an optSpec.
type optTable struct {
	short   map[byte]*optDef
	long    map[string]*optDef
	longs   []string // sorted long names, for prefix matching
	abbrev  bool     // unique prefixes of long options are accepted
	permute bool     // options may follow operands
	strict  bool     // unknown or ambiguous options are hazards
	digits  bool     // -NUM is an option (grep -5, head -20)
}

// allSpecs is every optSpec made, for the tests to build them all.
var allSpecs []*optSpec

// spec builds an optSpec. mode is a space-separated list of "abbrev",
// "permute", "strict", "digits" ("gnu" is abbrev permute strict). Each
// def is "names[=|=?] [effect[:detail]]": names separated by '|' (one
// letter for a short option), '=' for a required value, '=?' for an
// optional one; effects are path, write, inplace, exec, script, follow,
// dir, system, reads, writes. A bad definition panics when the table is
// built (TestOptionTablesBuild builds them all).
func spec(program, mode string, defs ...string) *optSpec {
	s := &optSpec{program: program, table: sync.OnceValue(func() *optTable { return buildTable(program, mode, defs) })}
	allSpecs = append(allSpecs, s)
	return s
}

// buildTable builds the table spec describes.
func buildTable(program, mode string, defs []string) *optTable {
	s := &optTable{short: map[byte]*optDef{}, long: map[string]*optDef{}}
	for _, m := range strings.Fields(mode) {
		switch m {
		case "gnu":
			s.abbrev, s.permute, s.strict = true, true, true
		case "abbrev":
			s.abbrev = true
		case "permute":
			s.permute = true
		case "strict":
			s.strict = true
		case "digits":
			s.digits = true
		default:
			panic("shell: bad option spec mode " + m)
		}
	}
	for _, d := range defs {
		head, eff, _ := strings.Cut(d, " ")
		def := &optDef{}
		switch {
		case strings.HasSuffix(head, "=?"):
			def.arg, head = argOptional, strings.TrimSuffix(head, "=?")
		case strings.HasSuffix(head, "="):
			def.arg, head = argRequired, strings.TrimSuffix(head, "=")
		}
		if eff != "" {
			name, detail, _ := strings.Cut(eff, ":")
			e, ok := effectNamed(name)
			if !ok {
				panic("shell: bad option effect " + name + " in " + program)
			}
			def.effect, def.detail = e, detail
		}
		def.names = strings.Split(head, "|")
		def.id = def.names[0]
		for _, n := range def.names {
			if len(n) == 1 {
				if s.short[n[0]] != nil {
					panic("shell: duplicate option -" + n + " in " + program)
				}
				s.short[n[0]] = def
			} else {
				if s.long[n] != nil {
					panic("shell: duplicate option --" + n + " in " + program)
				}
				s.long[n] = def
				s.longs = append(s.longs, n)
			}
		}
	}
	sort.Strings(s.longs)
	return s
}

// effectNamed is the effect a definition names.
func effectNamed(name string) (effect, bool) {
	switch name {
	case "path":
		return effPath, true
	case "write":
		return effWrite, true
	case "inplace":
		return effInPlace, true
	case "exec":
		return effExec, true
	case "script":
		return effScript, true
	case "follow":
		return effFollow, true
	case "dir":
		return effDir, true
	case "system":
		return effSystem, true
	case "reads":
		return effReads, true
	case "writes":
		return effWrites, true
	}
	return effNone, false
}

// parsedOpt is one option as the program sees it.
type parsedOpt struct {
	def      *optDef
	value    Word // the value, when it has one
	hasValue bool
	text     string // as written: "--outp=x", "-o x", "-rox"
}

// parsedArgs is a command line split as the program splits it.
type parsedArgs struct {
	opts     []parsedOpt
	operands []Word
	// problems are options the program would not accept or the analyser
	// cannot place: unknown, ambiguous, a value where none is taken.
	problems []problem
	// unsure reports an unknown option in a non-strict table, whose value
	// (if any) may have been taken for an operand.
	unsure bool
}

// problem is an option the program would reject or the analyser cannot
// place, with the word it is in.
type problem struct {
	word, msg string
}

// has reports whether an option with one of the ids was given.
func (p *parsedArgs) has(ids ...string) bool {
	for _, o := range p.opts {
		for _, id := range ids {
			if o.def.id == id {
				return true
			}
		}
	}
	return false
}

// value returns the value of the last option id given, or "".
func (p *parsedArgs) value(id string) string {
	v := ""
	for _, o := range p.opts {
		if o.def.id == id && o.hasValue {
			v = o.value.Value
		}
	}
	return v
}

// lookupLong finds a long option by its name or a prefix of it. It returns
// the option, or a problem.
func (s *optTable) lookupLong(name string) (*optDef, string) {
	if d := s.long[name]; d != nil {
		return d, ""
	}
	if name == "" {
		return nil, "unknown option --"
	}
	if !s.abbrev {
		// The program takes long options exactly; should it take
		// prefixes after all (another version), a prefix of an option
		// that matters would be that option: judge it so.
		for _, n := range s.longs {
			if d := s.long[n]; strings.HasPrefix(n, name) && d.effect != effNone {
				return d, ""
			}
		}
		return nil, "unknown option --" + name
	}
	i := sort.SearchStrings(s.longs, name)
	var match *optDef
	var names []string
	for ; i < len(s.longs) && strings.HasPrefix(s.longs[i], name); i++ {
		d := s.long[s.longs[i]]
		names = append(names, "--"+s.longs[i])
		if match != nil && match != d {
			return nil, fmt.Sprintf("ambiguous option --%s (%s)", name, strings.Join(names, ", ")) + ambiguousMore(s, name, i+1)
		}
		match = d
	}
	if match == nil {
		return nil, "unknown option --" + name
	}
	return match, ""
}

func ambiguousMore(s *optTable, name string, i int) string {
	n := 0
	for ; i < len(s.longs) && strings.HasPrefix(s.longs[i], name); i++ {
		n++
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more", n)
}

// parse splits args (argv without the program name) into options and
// operands.
func (spec *optSpec) parse(args []Word) *parsedArgs {
	s := spec.table()
	p := &parsedArgs{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.Value
		if !a.Literal || v == "-" || !strings.HasPrefix(v, "-") {
			p.operands = append(p.operands, a)
			if !s.permute {
				p.operands = append(p.operands, args[i+1:]...)
				return p
			}
			continue
		}
		if v == "--" {
			p.operands = append(p.operands, args[i+1:]...)
			return p
		}
		if strings.HasPrefix(v, "--") {
			name, val, has := strings.Cut(v[2:], "=")
			d, msg := s.lookupLong(name)
			if d == nil {
				if s.strict {
					p.problems = append(p.problems, problem{v, msg})
				} else {
					p.unsure = true
				}
				continue
			}
			o := parsedOpt{def: d, text: v}
			switch d.arg {
			case argNone:
				if has {
					p.problems = append(p.problems, problem{v, "option --" + name + " takes no value"})
				}
			case argRequired:
				if has {
					o.value, o.hasValue = Word{Value: val, Literal: true, Tilde: strings.HasPrefix(val, "~")}, true
				} else if i+1 < len(args) {
					i++
					o.value, o.hasValue = args[i], true
					o.text += " " + args[i].Value
				} else {
					p.problems = append(p.problems, problem{v, "option --" + name + " needs a value"})
				}
			case argOptional:
				if has {
					o.value, o.hasValue = Word{Value: val, Literal: true, Tilde: strings.HasPrefix(val, "~")}, true
				}
			}
			p.opts = append(p.opts, o)
			continue
		}
		if s.digits && isDigits(v[1:]) {
			continue
		}
	cluster:
		for j := 1; j < len(v); j++ {
			d := s.short[v[j]]
			if d == nil {
				if s.digits && v[j] >= '0' && v[j] <= '9' {
					continue
				}
				if s.strict {
					// The program stops at an unknown letter.
					p.problems = append(p.problems, problem{v, "unknown option -" + string(v[j])})
					break
				}
				// An option the table does not hold: the rest of the
				// cluster is read as letters too, which may see more than
				// the program does, never less.
				p.unsure = true
				continue
			}
			o := parsedOpt{def: d, text: v}
			switch d.arg {
			case argRequired:
				if j+1 < len(v) {
					val := v[j+1:]
					o.value, o.hasValue = Word{Value: val, Literal: true, Tilde: strings.HasPrefix(val, "~")}, true
				} else if i+1 < len(args) {
					i++
					o.value, o.hasValue = args[i], true
					o.text += " " + args[i].Value
				} else {
					p.problems = append(p.problems, problem{v, "option -" + string(v[j]) + " needs a value"})
				}
				p.opts = append(p.opts, o)
				break cluster
			case argOptional:
				if j+1 < len(v) {
					val := v[j+1:]
					o.value, o.hasValue = Word{Value: val, Literal: true, Tilde: strings.HasPrefix(val, "~")}, true
				}
				p.opts = append(p.opts, o)
				break cluster
			}
			p.opts = append(p.opts, o)
		}
	}
	return p
}

// judgeOptions parses cmd's arguments with s and records what the options
// do: hazards, paths, directories. It returns the parse for the program's
// own further judging (sed scripts, awk programs).
func (w *walker) judgeOptions(cmd *Command, s *optSpec, args []Word) *parsedArgs {
	p := s.parse(args)
	for _, pr := range p.problems {
		cmd.hazardAt(HazardUnsupported, s.program+": "+pr.msg+"; the analyser cannot tell what it does", pr.word)
	}
	for _, o := range p.opts {
		d := o.def
		detail := d.detail
		if detail == "" {
			detail = s.program + " " + o.text + " " + effectWords[d.effect]
		}
		switch d.effect {
		case effPath:
			if o.hasValue {
				w.optPath(cmd, o.value, false)
			}
		case effWrite:
			cmd.hazardAt(HazardWrite, detail, o.text)
			if o.hasValue {
				w.optPath(cmd, o.value, true)
			}
		case effInPlace, effWrites:
			cmd.hazardAt(HazardWrite, detail, o.text)
		case effExec:
			cmd.hazardAt(HazardExec, detail, o.text)
		case effScript:
			cmd.hazardAt(HazardScript, detail, o.text)
			if o.hasValue {
				w.optPath(cmd, o.value, false)
			}
		case effFollow:
			cmd.hazardAt(HazardFollow, detail, o.text)
		case effDir:
			if o.hasValue {
				w.dir(cmd, o.value, o.text)
			}
		case effSystem:
			cmd.hazardAt(HazardSystem, detail, o.text)
		case effReads:
			cmd.hazardAt(HazardRead, detail, o.text)
			if o.hasValue {
				w.optPath(cmd, o.value, false)
			}
		}
	}
	return p
}

var effectWords = map[effect]string{
	effWrite: "writes a file", effInPlace: "rewrites its files", effWrites: "writes files", effExec: "runs a program",
	effScript: "runs a script file whose content is not analysed", effFollow: "follows symbolic links out of the tree",
	effSystem: "changes the system", effReads: "reads files named in its arguments",
}

// optPath records an option value the program opens as a file.
func (w *walker) optPath(cmd *Command, v Word, write bool) {
	if !v.Literal {
		cmd.hazardAt(HazardExpansion, "an option value is not known statically", v.Value)
		return
	}
	if v.Value == "" || v.Value == "-" {
		return
	}
	cmd.Paths = append(cmd.Paths, PathArg{Path: v.Value, Tilde: v.Tilde || strings.HasPrefix(v.Value, "~"), Write: write})
}

// dir records a directory a program works in: relative paths resolve
// against it, and it is judged as a path itself.
func (w *walker) dir(cmd *Command, v Word, text string) {
	if !v.Literal {
		cmd.hazardAt(HazardExpansion, "the directory "+text+" is not known statically", text)
	}
	v.Tilde = v.Tilde || (v.Literal && strings.HasPrefix(v.Value, "~"))
	w.a.s.Dirs = append(w.a.s.Dirs, v)
	if v.Literal && v.Value != "" {
		cmd.Paths = append(cmd.Paths, PathArg{Path: v.Value, Tilde: v.Tilde})
	}
}
