package builtin

import (
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toolgate/toolgate/pkg/tools"
)

// fileTypes maps grep's type filter to file name globs (a subset of
// ripgrep's --type list).
var fileTypes = map[string][]string{
	"asm":      {"*.s", "*.S", "*.asm"},
	"c":        {"*.c", "*.h"},
	"cpp":      {"*.cpp", "*.cc", "*.cxx", "*.hpp", "*.hh", "*.hxx", "*.h", "*.inl"},
	"cs":       {"*.cs"},
	"css":      {"*.css", "*.scss", "*.sass", "*.less"},
	"docker":   {"Dockerfile", "*.dockerfile", "Dockerfile.*"},
	"go":       {"*.go"},
	"html":     {"*.html", "*.htm", "*.xhtml"},
	"java":     {"*.java"},
	"js":       {"*.js", "*.mjs", "*.cjs", "*.jsx"},
	"json":     {"*.json", "*.jsonl"},
	"kotlin":   {"*.kt", "*.kts"},
	"make":     {"Makefile", "makefile", "GNUmakefile", "*.mk", "*.mak"},
	"markdown": {"*.md", "*.markdown", "*.mdx"},
	"md":       {"*.md", "*.markdown", "*.mdx"},
	"php":      {"*.php"},
	"proto":    {"*.proto"},
	"py":       {"*.py", "*.pyi"},
	"ruby":     {"*.rb", "Gemfile", "Rakefile"},
	"rust":     {"*.rs"},
	"sh":       {"*.sh", "*.bash", "*.zsh", ".bashrc", ".profile"},
	"sql":      {"*.sql"},
	"swift":    {"*.swift"},
	"toml":     {"*.toml"},
	"ts":       {"*.ts", "*.tsx", "*.mts", "*.cts"},
	"txt":      {"*.txt"},
	"xml":      {"*.xml", "*.xsd", "*.xsl"},
	"yaml":     {"*.yaml", "*.yml"},
}

func typeNames() []string {
	var names []string
	for k := range fileTypes {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// grepOptions is one grep search, as the tool's arguments say it.
type grepOptions struct {
	pattern       string
	fixed, icase  bool
	mode          string
	before, after int
	lineNumbers   bool
	globs         []globFilter
	types         []string
	maxSize       int64
	maxLine       int
	maxStored     int // bytes of content lines kept before giving up on more
	// offset and headLimit page through the entries of the output.
	offset, headLimit int64
	// progress, when set, is told how far the search got (files
	// searched, files matched) every grepProgressFiles files.
	progress func(stream, chunk string)
}

// grepProgressFiles is how many files a search reports progress after;
// the pipeline bounds how often it is sent.
const grepProgressFiles = 1000

type globFilter struct {
	pattern  string
	negate   bool
	basename bool
}

// grepArgs reads a call's arguments into the options of one search and
// the path to search; an argument that cannot be used gives the failure
// to return instead.
func (s *set) grepArgs(c *tools.Call) (grepOptions, string, *tools.Output) {
	o := grepOptions{mode: modeFiles, lineNumbers: true, maxSize: s.cfg.MaxReadSize, maxLine: s.cfg.MaxLineLength, maxStored: 16 << 20,
		progress: c.Progress}
	o.pattern = tools.ArgString(c.Args, "pattern")
	base := tools.ArgString(c.Args, "path")
	if base == "" {
		base = "."
	}
	o.fixed = tools.ArgBool(c.Args, "fixed_string")
	o.icase = tools.ArgBool(c.Args, "case_insensitive", "-i")
	if m := tools.ArgString(c.Args, "output_mode"); m != "" {
		o.mode = m
	}
	if n, ok := tools.ArgInt(c.Args, "-C", "context"); ok {
		o.before, o.after = int(n), int(n)
	}
	if n, ok := tools.ArgInt(c.Args, "-B", "context_before"); ok {
		o.before = int(n)
	}
	if n, ok := tools.ArgInt(c.Args, "-A", "context_after"); ok {
		o.after = int(n)
	}
	if v, ok := c.Args["-n"].(bool); ok {
		o.lineNumbers = v
	}
	o.offset, _ = tools.ArgInt(c.Args, "offset")
	o.headLimit, _ = tools.ArgInt(c.Args, "head_limit")
	if m := policyMaxResults(c, 0); m > 0 && (o.headLimit == 0 || m < o.headLimit) {
		o.headLimit = m // the policy's max_results bounds every search
	}
	if g := tools.ArgString(c.Args, "glob"); g != "" {
		f := globFilter{pattern: g}
		if strings.HasPrefix(g, "!") {
			f.negate, f.pattern = true, g[1:]
		}
		f.basename = !strings.Contains(f.pattern, "/")
		if !doublestar.ValidatePattern(f.pattern) {
			return o, base, failf("grep: glob %q is not a valid pattern", g)
		}
		o.globs = append(o.globs, f)
	}
	if t := tools.ArgString(c.Args, "type"); t != "" {
		globs, known := fileTypes[t]
		if !known {
			return o, base, failf("grep: unknown type %q; known types: %s", t, strings.Join(typeNames(), ", "))
		}
		o.types = globs
	}
	return o, base, nil
}
