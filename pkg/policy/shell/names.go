package shell

import (
	"strings"
)

// Words bash evaluates as variable names. A name may carry an array
// subscript (a[...]), and bash expands the subscript - parameters, command
// and arithmetic substitutions - and evaluates it as arithmetic: the word
// 'a[$(cmd)]' given to printf -v, read, test -v, declare, unset, ... runs
// cmd, although it is a quoted, literal argument. Such words are judged as
// code: the subscript is parsed and every command in it is judged like any
// other, and the word itself is a hazard a person must look at.

// nameBuiltins are the builtins that take variable names as arguments.
var nameBuiltins = map[string]bool{
	"printf": true, "read": true, "test": true, "[": true, "declare": true, "typeset": true, "local": true,
	"export": true, "readonly": true, "unset": true, "mapfile": true, "readarray": true, "getopts": true,
	"wait": true, "let": true,
}

// nameArgs returns the arguments of a name-taking builtin that bash
// evaluates as variable names, and those it evaluates as arithmetic
// expressions (let).
func nameArgs(base string, args []Word) (names, arith []Word) {
	args = args[1:]
	// getoptNames walks options in the manner of bash's internal_getopt:
	// spec letters followed by ':' take a value; values of the letters in
	// nameOpts are names. It returns the index of the first operand.
	getoptNames := func(spec, nameOpts string) int {
		i := 0
		for i < len(args) {
			v := args[i].Value
			if !args[i].Literal || len(v) < 2 || v[0] != '-' {
				return i
			}
			if v == "--" {
				return i + 1
			}
			i++
			for j := 1; j < len(v); j++ {
				k := strings.IndexByte(spec, v[j])
				if k < 0 || k+1 >= len(spec) || spec[k+1] != ':' {
					continue
				}
				var val Word
				if j+1 < len(v) {
					val = Word{Value: v[j+1:], Literal: true}
				} else if i < len(args) {
					val = args[i]
					i++
				}
				if strings.IndexByte(nameOpts, v[j]) >= 0 {
					names = append(names, val)
				}
				break
			}
		}
		return i
	}
	switch base {
	case "printf":
		getoptNames("v:", "v")
	case "read":
		i := getoptNames("ersa:d:i:n:p:t:u:N:", "a")
		names = append(names, args[i:]...)
	case "mapfile", "readarray":
		i := getoptNames("d:n:O:s:u:C:c:t", "")
		names = append(names, args[i:]...)
	case "wait":
		getoptNames("fnp:", "p")
	case "getopts":
		if len(args) >= 2 {
			names = append(names, args[1])
		}
	case "test", "[":
		for i := 0; i+1 < len(args); i++ {
			if v := args[i].Value; args[i].Literal && (v == "-v" || v == "-R") {
				names = append(names, args[i+1])
			}
		}
	case "declare", "typeset", "local", "export", "readonly", "unset":
		for _, a := range args {
			if a.Literal && (strings.HasPrefix(a.Value, "-") || strings.HasPrefix(a.Value, "+")) {
				continue
			}
			if a.Literal {
				if n, _, ok := strings.Cut(a.Value, "="); ok {
					a.Value = n
				}
			}
			names = append(names, a)
		}
	case "let":
		arith = args
	}
	return names, arith
}

// compound judges a quoted value declare, typeset or local evaluates as
// an array assignment: 'a=($(cmd))' runs cmd when a is (or becomes) an
// array. The value is parsed as the assignment bash makes of it and every
// command in it is judged.
func (w *walker) compound(add func(HazardKind, string, string), variant, name, value string) {
	if !strings.HasPrefix(strings.TrimLeft(value, " \t\n"), "(") {
		return
	}
	add(HazardEval, variant+" evaluates the quoted array assignment "+name+"="+value+" as code", name+"="+value)
	before := w.a.err
	if err := w.a.parse("x="+value, w.depth+1, w.wrappedBy); err != nil && before == nil && w.a.err == nil {
		add(HazardUnsupported, "the array assignment "+name+"="+value+" cannot be analysed", name+"="+value)
	}
}

// judgeNames adds the hazards of the names and arithmetic a builtin
// evaluates, and judges the commands hidden in their subscripts.
func (w *walker) judgeNames(cmd *Command, base string) {
	names, arith := nameArgs(base, cmd.Args)
	switch base {
	case "declare", "typeset", "local", "export", "readonly":
		for _, a := range cmd.Args[1:] {
			if n, v, ok := strings.Cut(a.Value, "="); ok && a.Literal {
				w.compound(func(k HazardKind, d, part string) { cmd.hazardAt(k, d, part) }, base, n, v)
			}
		}
	}
	for _, n := range names {
		if !n.Literal {
			cmd.hazardAt(HazardArithmetic, base+" takes a variable name that is not known statically; its subscript would be evaluated as arithmetic", n.Value)
			continue
		}
		w.nameText(cmd, base, n.Value)
		if assigners[base] {
			assigned(func(k HazardKind, d string) { cmd.hazardAt(k, d, n.Value) }, base, n.Value)
		}
	}
	for _, a := range arith {
		if !a.Literal {
			cmd.hazardAt(HazardArithmetic, base+" evaluates an expression not known statically as arithmetic", a.Value)
			continue
		}
		if !plainNumber(a.Value) {
			cmd.hazardAt(HazardArithmetic, base+" evaluates "+a.Value+" as arithmetic, which can run command substitutions", a.Value)
			if !w.hidden(a.Value, cmd.WrappedBy) {
				cmd.hazardAt(HazardUnsupported, "an expansion inside "+a.Value+" cannot be analysed", a.Value)
			}
		}
	}
}

// nameText judges one literal word taken as a variable name.
func (w *walker) nameText(cmd *Command, base, v string) {
	open := strings.IndexByte(v, '[')
	if open < 0 {
		return
	}
	sub := v[open+1:]
	if end := strings.LastIndexByte(sub, ']'); end >= 0 {
		sub = sub[:end]
	}
	if plainNumber(sub) {
		return
	}
	cmd.hazardAt(HazardArithmetic, base+" evaluates the subscript of "+v+" as arithmetic, which can run command substitutions", v)
	if !w.hidden(sub, cmd.WrappedBy) {
		cmd.hazardAt(HazardUnsupported, "an expansion inside "+v+" cannot be analysed", v)
	}
}

// plainNumber reports text arithmetic cannot run anything in: digits,
// blanks and operators, no names, no expansions.
func plainNumber(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9') && !strings.ContainsRune(" \t+-*/%()", rune(c)) {
			return false
		}
	}
	return true
}

// hidden parses text bash expands as if double-quoted before evaluating it
// (an array subscript, a let expression) and judges every command in it.
// It reports false when the text cannot be read.
func (w *walker) hidden(text string, wrappedBy []string) bool {
	if !strings.ContainsAny(text, "$`") {
		return true
	}
	before := w.a.err
	src := `: "` + strings.ReplaceAll(text, `"`, `\"`) + `"`
	if err := w.a.parse(src, w.depth+1, wrappedBy); err != nil && before == nil && w.a.err == nil {
		return false
	}
	return true
}

// assigners are the builtins that assign the variables they are given
// (read NAME, printf -v NAME, getopts OPTS NAME, mapfile NAME, wait -p
// NAME): such a name is judged as an assignment.
var assigners = set("read", "printf", "mapfile", "readarray", "getopts", "wait")

// assigned judges a variable a builtin or a loop assigns as an
// assignment in the shell: a name that is not a plain lower-case one
// (HOME, XDG_CONFIG_HOME, OLDPWD, CDPATH, ...) reaches, when inherited
// exported, every later program, or changes what the shell does.
func assigned(add func(HazardKind, string), by, name string) {
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	if !shellVarSafe(name) {
		add(HazardEnv, by+" assigns "+name+", which changes what later programs run or read")
	}
}
