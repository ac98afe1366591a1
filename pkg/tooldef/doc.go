package tooldef

import (
	"fmt"
	"strings"
)

// Reference returns the tool reference in Markdown (docs/TOOLS.md): for
// each built-in tool its aliases and kind, what it touches, and a table of
// its arguments.
func Reference() string {
	var b strings.Builder
	b.WriteString(`# Built-in tools

<!-- Generated from pkg/tooldef by ` + "`go test ./pkg/tooldef -run Reference -args -update`" + `; do not edit. -->

Each built-in tool is defined once, in ` + "`pkg/tooldef`" + `: its name,
aliases, kind and arguments. Its JSON Schema, the policy's judgement of
its paths and commands ([POLICY.md](POLICY.md)), the approver's display
and the hook mapping ([HOOKS.md](HOOKS.md)) are made from that definition.

A policy may name a tool by its name or any alias. **Touches** says which
arguments the gate judges: a *path* by the path rules (` + "`denied_paths`" + `,
` + "`allowed_paths`" + `, the workspace), a *command* on its syntax tree.

| tool | aliases | kind | touches |
| --- | --- | --- | --- |
`)
	for _, d := range All() {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s | %s |\n", d.Name, d.Name, codes(d.Aliases), d.Kind, touches(d))
	}
	for _, d := range All() {
		fmt.Fprintf(&b, "\n## %s\n\n", d.Name)
		if len(d.Aliases) > 0 {
			fmt.Fprintf(&b, "Aliases: %s. ", codes(d.Aliases))
		}
		fmt.Fprintf(&b, "Kind: `%s`.\n\n", d.Kind)
		b.WriteString("| argument | type | required | stands for | description |\n| --- | --- | --- | --- | --- |\n")
		for _, a := range d.Args {
			req := ""
			if a.Required {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", a.Name, a.Type, req, role(a), cell(a.Doc))
		}
	}
	return b.String()
}

// touches says what the tool's arguments touch, for the summary table.
func touches(d *Def) string {
	var out []string
	for _, a := range d.Args {
		switch a.Role {
		case Path:
			out = append(out, fmt.Sprintf("%s the %s `%s`", verb(a.Access), target(a.Target), a.Name))
		case PathPattern:
			out = append(out, fmt.Sprintf("paths matching `%s`", a.Name))
		case Command:
			out = append(out, fmt.Sprintf("runs the command `%s`", a.Name))
		case Workdir:
			out = append(out, fmt.Sprintf("in the directory `%s`", a.Name))
		}
	}
	if len(out) == 0 {
		return "—"
	}
	return strings.Join(out, "; ")
}

// role says what an argument stands for, for the argument tables.
func role(a Arg) string {
	s := ""
	switch a.Role {
	case Path:
		s = fmt.Sprintf("path: %s the %s", verb(a.Access), target(a.Target))
	case PathPattern:
		s = "path pattern"
	case Pattern:
		s = "search pattern"
	case Command:
		s = "command line"
	case Workdir:
		s = "working directory"
	case Content:
		s = "new content"
	case OldText:
		s = "text replaced"
	case NewText:
		s = "replacement text"
	default:
		return "option"
	}
	if a.Default != "" {
		s += " (default: " + a.Default + ")"
	}
	return s
}

func verb(a Access) string {
	if a == Writes {
		return "writes"
	}
	return "reads"
}

func target(t Target) string {
	switch t {
	case Dir:
		return "directory"
	case Tree:
		return "file or directory tree"
	}
	return "file"
}

func codes(names []string) string {
	if len(names) == 0 {
		return "—"
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return strings.Join(out, ", ")
}

// cell escapes text for a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
