package tooldef

// minimum is the JSON Schema keyword of an integer's least value.
func minimum(n int) map[string]any { return map[string]any{"minimum": n} }

// The built-in tools.
var (
	// Read reads a text file.
	Read = &Def{
		Name: "read", Aliases: []string{"read_file"}, Kind: KindRead, Pure: true,
		Args: []Arg{
			{Name: "path", Type: String, Required: true, Role: Path, Access: Reads, Target: File,
				Doc: "File to read: relative to the workspace, or absolute inside an allowed root."},
			{Name: "offset", Type: Integer, Schema: minimum(0), Doc: "Line number to start reading from (1-based; 0 also means the first line)."},
			{Name: "limit", Type: Integer, Schema: minimum(1), Doc: "Number of lines to read."},
			{Name: "start_line", Type: Integer, Schema: minimum(1), Doc: "First line to read (1-based, inclusive). Alternative to offset."},
			{Name: "end_line", Type: Integer, Schema: minimum(1), Doc: "Last line to read (1-based, inclusive). Alternative to limit."},
		},
	}
	// Write replaces a file whole.
	Write = &Def{
		Name: "write", Aliases: []string{"write_file"}, Kind: KindWrite,
		Args: []Arg{
			{Name: "path", Type: String, Required: true, Role: Path, Access: Writes, Target: File,
				Doc: "File to write: relative to the workspace, or absolute inside an allowed root."},
			{Name: "content", Type: String, Required: true, Role: Content, Doc: "The complete new content of the file."},
		},
	}
	// Edit replaces exact text in a file.
	Edit = &Def{
		Name: "edit", Aliases: []string{"edit_file"}, Kind: KindWrite,
		Args: []Arg{
			{Name: "path", Type: String, Required: true, Role: Path, Access: Writes, Target: File,
				Doc: "File to edit: relative to the workspace, or absolute inside an allowed root."},
			{Name: "old_string", Type: String, Required: true, Role: OldText, Doc: "Exact text to replace."},
			{Name: "new_string", Type: String, Required: true, Role: NewText, Doc: "Text to put in its place (must differ from old_string)."},
			{Name: "replace_all", Type: Boolean, Doc: "Replace every occurrence of old_string instead of requiring exactly one."},
		},
	}
	// Ls lists a directory.
	Ls = &Def{
		Name: "ls", Aliases: []string{"list_files"}, Kind: KindRead, Pure: true,
		Args: []Arg{
			{Name: "path", Type: String, Role: Path, Access: Reads, Target: Dir, Default: "the workspace",
				Doc: "Directory to list: relative to the workspace (default: the workspace), or absolute inside an allowed root."},
			{Name: "hidden", Type: Boolean, Doc: "Include entries whose name starts with '.'."},
			{Name: "limit", Type: Integer, Schema: minimum(1), Doc: "Most entries to list."},
		},
	}
	// Glob finds files by name pattern.
	Glob = &Def{
		Name: "glob", Kind: KindSearch, Pure: true,
		Args: []Arg{
			{Name: "pattern", Type: String, Required: true, Role: PathPattern,
				Doc: "Glob pattern, doublestar syntax: *, ?, [class], {a,b}, ** for any directories."},
			{Name: "path", Type: String, Role: Path, Access: Reads, Target: Tree, Default: "the workspace",
				Doc: "Directory to search from: relative to the workspace (default: the workspace), or absolute inside an allowed root."},
			{Name: "limit", Type: Integer, Schema: minimum(1), Doc: "Most paths to return."},
			{Name: "hidden", Type: Boolean, Doc: "Include files and directories whose name starts with '.'."},
			{Name: "no_ignore", Type: Boolean, Doc: "Do not honour .gitignore files."},
		},
	}
	// Grep searches file contents.
	Grep = &Def{
		Name: "grep", Aliases: []string{"search_files"}, Kind: KindSearch, Pure: true,
		Args: []Arg{
			{Name: "pattern", Type: String, Required: true, Role: Pattern, Doc: "Regular expression (RE2) to search for, or a fixed string when fixed_string is true."},
			{Name: "path", Type: String, Role: Path, Access: Reads, Target: Tree, Default: "the workspace",
				Doc: "File or directory to search: relative to the workspace (default: the workspace), or absolute inside an allowed root."},
			{Name: "glob", Type: String, Doc: "Only search files matching this glob (basename when it has no '/', else the path relative to path); a leading '!' excludes."},
			{Name: "type", Type: String, Doc: "Only search files of this type."},
			{Name: "output_mode", Type: String, Doc: "What to return; default files_with_matches."},
			{Name: "case_insensitive", Type: Boolean, Doc: "Match case-insensitively."},
			{Name: "-i", Type: Boolean, Doc: "Same as case_insensitive."},
			{Name: "fixed_string", Type: Boolean, Doc: "Treat pattern as a literal string, not a regular expression."},
			{Name: "-A", Type: Integer, Schema: minimum(0), Doc: "Lines of context after each match (content mode)."},
			{Name: "-B", Type: Integer, Schema: minimum(0), Doc: "Lines of context before each match (content mode)."},
			{Name: "-C", Type: Integer, Schema: minimum(0), Doc: "Lines of context before and after each match (content mode)."},
			{Name: "context_after", Type: Integer, Schema: minimum(0), Doc: "Same as -A."},
			{Name: "context_before", Type: Integer, Schema: minimum(0), Doc: "Same as -B."},
			{Name: "context", Type: Integer, Schema: minimum(0), Doc: "Same as -C."},
			{Name: "-n", Type: Boolean, Doc: "Show line numbers in content mode (default true)."},
			{Name: "offset", Type: Integer, Schema: minimum(0), Doc: "Skip this many entries (lines in content mode, files otherwise) before returning any."},
			{Name: "head_limit", Type: Integer, Schema: minimum(0), Doc: "Return at most this many entries after offset (0 means no limit)."},
			{Name: "hidden", Type: Boolean, Doc: "Search files and directories whose name starts with '.'."},
			{Name: "no_ignore", Type: Boolean, Doc: "Do not honour .gitignore files."},
		},
	}
	// Skill loads a skill's instructions.
	Skill = &Def{
		Name: "skill", Kind: KindRead,
		Args: []Arg{
			{Name: "skill", Type: String, Doc: "Name of the skill to load; omit to list the skills."},
		},
	}
	// Bash runs a shell command line.
	Bash = &Def{
		Name: "bash", Aliases: []string{"run_shell", "exec"}, Kind: KindExecute,
		Args: []Arg{
			{Name: "command", Type: String, Required: true, Role: Command, Schema: map[string]any{"minLength": 1, "pattern": `\S`},
				Doc: "The command line, run with bash -c."},
			{Name: "cwd", Type: String, Role: Workdir, Default: "the workspace",
				Doc: "Directory to run in: relative to the workspace, or absolute inside it. Default: the workspace."},
			{Name: "timeout", Type: Integer, Schema: map[string]any{"minimum": 0, "maximum": 600000},
				Doc: "Timeout in milliseconds, at most 600000. 0 or absent: 60000."},
			{Name: "description", Type: String, Doc: "What the command does, in a few words, for people reading the log."},
		},
	}
)

// The web tools (pkg/tools/web). Their bounds are set by the tools
// themselves, through Schema's extra keywords.
var (
	// WebFetch fetches a URL with GET.
	WebFetch = &Def{
		Name: "web_fetch", Kind: KindNetwork,
		Args: []Arg{
			{Name: "url", Type: String, Required: true, Role: URL, Schema: map[string]any{"minLength": 1, "maxLength": 8192},
				Doc: "The http or https URL to fetch."},
			{Name: "max_bytes", Type: Integer, Schema: minimum(1), Doc: "Most bytes of the body to read; the rest is cut."},
			{Name: "timeout", Type: Integer, Schema: minimum(1), Doc: "Timeout of the whole fetch in milliseconds."},
		},
	}
	// WebSearch searches the web through a search service.
	WebSearch = &Def{
		Name: "web_search", Kind: KindNetwork,
		Args: []Arg{
			{Name: "query", Type: String, Required: true, Role: Query, Schema: map[string]any{"minLength": 1, "maxLength": 2000},
				Doc: "What to search for."},
			{Name: "max_results", Type: Integer, Schema: minimum(1), Doc: "How many results."},
			{Name: "search_depth", Type: String, Schema: map[string]any{"enum": []string{"basic", "advanced"}}, Doc: "basic (default) or advanced."},
			{Name: "topic", Type: String, Schema: map[string]any{"enum": []string{"general", "news", "finance"}}, Doc: "general (default), news or finance."},
			{Name: "include_answer", Type: Boolean, Doc: "Also return a short answer to the query."},
			{Name: "time_range", Type: String, Schema: map[string]any{"enum": []string{"day", "week", "month", "year"}}, Doc: "Only results published within this range."},
			{Name: "include_domains", Type: Array, Schema: map[string]any{"maxItems": 50, "items": map[string]any{"type": "string", "maxLength": 253}},
				Doc: "Only results from these domains."},
			{Name: "exclude_domains", Type: Array, Schema: map[string]any{"maxItems": 50, "items": map[string]any{"type": "string", "maxLength": 253}},
				Doc: "No results from these domains."},
		},
	}
)

// Task hands a sub-task to another agent of the fleet (internal/delegate).
var Task = &Def{
	Name: "task", Kind: KindOther,
	Args: []Arg{
		{Name: "agent", Type: String, Required: true, Schema: map[string]any{"minLength": 1, "maxLength": 128, "pattern": `^[^.*>\s]+$`},
			Doc: "The agent of the fleet to hand the task to."},
		{Name: "prompt", Type: String, Required: true, Schema: map[string]any{"minLength": 1, "maxLength": 100000},
			Doc: "What the agent should do."},
		{Name: "context", Type: String, Schema: map[string]any{"maxLength": 100000},
			Doc: "What you know that helps: files, findings, constraints."},
		{Name: "expected_outcome", Type: String, Schema: map[string]any{"maxLength": 10000},
			Doc: "What a good answer looks like."},
		{Name: "allowed_tools", Type: Array, Schema: map[string]any{"maxItems": 64, "items": map[string]any{"type": "string", "minLength": 1, "maxLength": 128}},
			Doc: "The only tools the agent may use for this task (default: what its policy allows)."},
		{Name: "timeout", Type: Integer, Schema: minimum(1), Doc: "How long to wait for the answer, in milliseconds (default 10 minutes)."},
	},
}

var all = []*Def{Read, Write, Edit, Ls, Glob, Grep, Skill, Bash, WebFetch, WebSearch, Task}
