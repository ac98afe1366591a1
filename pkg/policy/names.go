package policy

// The built-in tools and the names the seeds use for them.
var aliases = map[string]string{
	"read_file":    "read",
	"write_file":   "write",
	"edit_file":    "edit",
	"list_files":   "ls",
	"search_files": "grep",
	"run_shell":    "bash",
	"exec":         "bash",
}

var builtinKinds = map[string]Kind{
	"read":  KindRead,
	"write": KindWrite,
	"edit":  KindWrite,
	"ls":    KindRead,
	"glob":  KindSearch,
	"grep":  KindSearch,
	"bash":  KindExecute,
	// The web tools (pkg/tools/web).
	"web_fetch":  KindNetwork,
	"web_search": KindNetwork,
}

// CanonicalTool returns the built-in name an alias stands for (run_shell and
// exec → bash, read_file → read, ...), or name itself.
func CanonicalTool(name string) string {
	if c, ok := aliases[name]; ok {
		return c
	}
	return name
}

// BuiltinKind returns the kind of a built-in tool (aliases accepted) and
// whether name is one.
func BuiltinKind(name string) (Kind, bool) {
	k, ok := builtinKinds[CanonicalTool(name)]
	return k, ok
}

func isShellTool(canonical string) bool { return canonical == "bash" }

// fileTools take a path argument judged by path rules.
func isFileTool(canonical string) bool {
	switch canonical {
	case "read", "write", "edit", "ls", "glob", "grep":
		return true
	}
	return false
}

func isWriteTool(canonical string) bool { return canonical == "write" || canonical == "edit" }

var validKinds = map[Kind]bool{KindRead: true, KindWrite: true, KindExecute: true, KindSearch: true, KindNetwork: true, KindOther: true}
