package policy

import (
	"sync"

	"github.com/toolgate/toolgate/pkg/tooldef"
)

// What the gate knows of the built-in tools comes from their definitions
// in pkg/tooldef: names, aliases, kinds, and which argument is a path, a
// path pattern, a command.

// shellTool is the built-in tool that runs command lines.
var shellTool = tooldef.Bash.Name

// commandArg and workdirArg are the shell tool's command line and working
// directory.
var (
	commandArg = tooldef.Bash.Arg(tooldef.Command).Name
	workdirArg = tooldef.Bash.Arg(tooldef.Workdir).Name
)

// CanonicalTool returns the built-in name an alias stands for (run_shell and
// exec → bash, read_file → read, ...), or name itself.
func CanonicalTool(name string) string { return tooldef.Canonical(name) }

// BuiltinKind returns the kind of a built-in tool (aliases accepted) and
// whether name is one.
func BuiltinKind(name string) (Kind, bool) {
	d, ok := tooldef.Lookup(name)
	if !ok {
		return "", false
	}
	return Kind(d.Kind), true
}

func isShellTool(canonical string) bool { return canonical == shellTool }

// pathArg returns the path argument of a built-in tool, or nil: file tools
// take one, judged by the path rules.
func pathArg(canonical string) *tooldef.Arg {
	d, ok := tooldef.Lookup(canonical)
	if !ok || d.Name != canonical {
		return nil
	}
	return d.Arg(tooldef.Path)
}

func isFileTool(canonical string) bool { return pathArg(canonical) != nil }

func isWriteTool(canonical string) bool {
	a := pathArg(canonical)
	return a != nil && a.Access == tooldef.Writes
}

// pathFamily returns the file tools whose path has the same access as
// tool's: they share their denied paths (a path denied to read is denied
// to grep, glob and ls too; one denied to write is denied to edit).
func pathFamily(tool string) []string { return families()[tool] }

// families holds pathFamily's answers: the built-in tools are fixed when
// the program is built, and the gate asks on every file tool's call.
// Made on first use.
var families = sync.OnceValue(func() map[string][]string {
	m := map[string][]string{}
	for _, d := range tooldef.All() {
		if a := pathArg(d.Name); a != nil {
			m[d.Name] = tooldef.WithPath(a.Access, "")
		}
	}
	return m
})

var validKinds = map[Kind]bool{KindRead: true, KindWrite: true, KindExecute: true, KindSearch: true, KindNetwork: true, KindOther: true}
