package shell

import "strings"

// Option tables of the programs whose options the gate must understand:
// the read-only programs with options that write, run programs, read
// other files or follow links, and the programs that change directory.
// Each lists every option the program accepts (GNU versions as shipped by
// Debian), so that abbreviations resolve as the program resolves them.

var sedSpec = spec("sed", "gnu",
	"n|quiet|silent", "debug", "e|expression=", "f|file= script:sed -f runs a script file whose content is not analysed",
	"follow-symlinks", "i|in-place=? inplace:sed -i rewrites files", "l|line-length=", "posix",
	"E|r|regexp-extended", "s|separate", "sandbox", "u|unbuffered", "z|null-data|zero-terminated", "b|binary", "help", "version")

var sortSpec = spec("sort", "gnu",
	"b|ignore-leading-blanks", "d|dictionary-order", "f|ignore-case", "g|general-numeric-sort", "i|ignore-nonprinting",
	"M|month-sort", "h|human-numeric-sort", "n|numeric-sort", "R|random-sort", "random-source= path", "r|reverse",
	"sort=", "V|version-sort", "batch-size=", "c|check=?", "C", "compress-program= exec:sort --compress-program runs a program",
	"debug", "files0-from= reads:sort --files0-from reads the files a list names, which no rule sees", "k|key=", "m|merge", "o|output= write:sort -o writes a file", "s|stable",
	"S|buffer-size=", "t|field-separator=", "T|temporary-directory= path", "parallel=", "u|unique",
	"z|zero-terminated", "help", "version")

var grepSpec = spec("grep", "gnu digits",
	"E|extended-regexp", "F|fixed-strings", "G|basic-regexp", "P|perl-regexp", "e|regexp=", "f|file= path",
	"i|y|ignore-case", "no-ignore-case", "w|word-regexp", "x|line-regexp", "z|null-data", "s|no-messages",
	"v|invert-match", "V|version", "help", "m|max-count=", "b|byte-offset", "n|line-number", "no-line-number", "line-buffered",
	"H|with-filename", "h|no-filename", "label=", "o|only-matching", "q|quiet|silent", "binary-files=", "a|text",
	"I", "d|directories=", "D|devices=", "r|recursive", "R|dereference-recursive follow:grep -R follows symbolic links out of the tree",
	"include=", "exclude=", "exclude-from= path", "exclude-dir=", "L|files-without-match", "l|files-with-matches",
	"c|count", "T|initial-tab", "Z|null", "B|before-context=", "A|after-context=", "C|context=", "color=?", "colour=?",
	"U|binary", "u|unix-byte-offsets")

// ripgrep's parser takes long options exactly, not by prefix; its table is
// not exhaustive, so unknown options are let through (none of them run a
// program, write, or follow links).
var rgSpec = spec("rg", "permute",
	"pre= exec:rg --pre runs a program", "pre-glob=", "hostname-bin= exec:rg --hostname-bin runs a program",
	"L|follow follow:rg -L follows symbolic links out of the tree", "f|file= path", "ignore-file= path",
	"A|after-context=", "B|before-context=", "C|context=", "E|encoding=", "M|max-columns=", "T|type-not=", "t|type=",
	"d|max-depth=", "e|regexp=", "g|glob=", "iglob=", "j|threads=", "m|max-count=", "r|replace=", "type-add=",
	"color=", "colors=", "path-separator=", "sort=", "sortr=", "max-filesize=", "context-separator=",
	"field-context-separator=", "field-match-separator=", "engine=", "dfa-size-limit=", "regex-size-limit=",
	"generate=", "type-clear=", "hyperlink-format=", "max-columns-preview", "z|search-zip",
	"i|ignore-case", "S|smart-case", "s|case-sensitive", "n|line-number", "N|no-line-number", "l|files-with-matches",
	"c|count", "o|only-matching", "v|invert-match", "w|word-regexp", "x|line-regexp", "F|fixed-strings", "P|pcre2",
	"u|unrestricted", "a|text", "H|with-filename", "I|no-filename", "p|pretty", "q|quiet", "U|multiline", "V|version",
	"h|help", "0|null", "b|byte-offset", "uu", "hidden", "no-ignore", "files", "json", "vimgrep", "heading", "no-heading",
	"debug", "trace", "stats", "column", "no-messages", "passthru", "type-list", "null-data", "one-file-system",
	"no-config", "no-follow")

var fdSpec = spec("fd", "permute",
	"x|exec= exec:fd --exec runs a program", "X|exec-batch= exec:fd --exec-batch runs a program",
	"L|follow follow:fd -L follows symbolic links out of the tree", "ignore-file= path",
	"d|max-depth=", "min-depth=", "exact-depth=", "t|type=", "e|extension=", "E|exclude=", "S|size=", "changed-within=",
	"changed-before=", "o|owner=", "j|threads=", "c|color=", "base-directory= dir", "search-path=", "path-separator=",
	"max-results=", "format=", "batch-size=", "and=", "H|hidden", "I|no-ignore", "u|unrestricted", "s|case-sensitive",
	"i|ignore-case", "g|glob", "regex", "F|fixed-strings", "a|absolute-path", "l|list-details", "p|full-path",
	"0|print0", "1", "q|quiet", "show-errors", "h|help", "V|version", "prune", "one-file-system", "strip-cwd-prefix=?")

var treeSpec = spec("tree", "strict",
	"o= write:tree -o writes a file", "l follow:tree -l follows symbolic links out of the tree",
	"a", "d", "f", "x", "L=", "R writes:tree -R writes 00Tree.html into every directory", "P=", "I=", "gitignore", "ignore-case", "matchdirs", "metafirst", "prune", "info",
	"infofile= path", "noreport", "charset=", "filelimit=", "timefmt=", "fromfile", "fromtabfile", "fflinks",
	"q", "N", "Q", "p", "u", "g", "s", "h", "si", "du", "D", "F", "inodes", "device", "v", "t", "c", "U", "r",
	"dirsfirst", "filesfirst", "sort=", "i", "A", "S", "n", "C", "X", "J", "H=", "T=", "nolinks", "hintro=", "houtro=",
	"version", "help")

var lessSpec = spec("less", "gnu",
	"o|log-file= write:less -o writes a log file", "O|LOG-FILE= write:less -O writes a log file",
	"k|lesskey-file= script:less -k reads key bindings, which run commands", "lesskey-src= script:less reads key bindings, which run commands",
	"t|tag=", "T|tag-file= path", "x|tabs=", "y|max-forw-scroll=", "z|window=", "b|buffers=", "h|max-back-scroll=",
	"j|jump-target=", "p|pattern=", "P|prompt=", "shift=", "#=", "a|search-skip-screen", "A|SEARCH-SKIP-SCREEN",
	"B|auto-buffers", "c|clear-screen", "C|CLEAR-SCREEN", "d|dumb", "e|quit-at-eof", "E|QUIT-AT-EOF", "f|force",
	"F|quit-if-one-screen", "g|hilite-search", "G|HILITE-SEARCH", "i|ignore-case", "I|IGNORE-CASE", "J|status-column",
	"K|quit-on-intr", "L|no-lessopen", "m|long-prompt", "M|LONG-PROMPT", "n|line-numbers", "N|LINE-NUMBERS",
	"q|quiet|silent", "Q|QUIET|SILENT", "r|raw-control-chars", "R|RAW-CONTROL-CHARS", "s|squeeze-blank-lines",
	"S|chop-long-lines", "u|underline-special", "U|UNDERLINE-SPECIAL", "V|version", "w|hilite-unread",
	"W|HILITE-UNREAD", "X|no-init", "help", "follow-name", "mouse", "no-keypad", "no-histdups", "save-marks",
	"use-color", "incsearch", "line-num-width=", "status-col-width=", "header=", "wordwrap", "redraw-on-quit",
	"rscroll=", "use-backslash", "exit-follow-on-close", "no-number-headers", "file-size", "search-options=",
	"color=", "D=")

var dateSpec = spec("date", "gnu",
	"d|date=", "debug", "f|file= path", "I|iso-8601=?", "R|rfc-email", "rfc-3339=", "r|reference= path",
	"s|set= system:date -s sets the clock", "u|utc|universal", "help", "version", "resolution")

var hostnameSpec = spec("hostname", "gnu",
	"a|alias", "A|all-fqdns", "b|boot", "d|domain", "f|fqdn|long", "F|file= system:hostname -F sets the host name",
	"i|ip-address", "I|all-ip-addresses", "s|short", "y|yp|nis", "h|help", "V|version", "v|verbose")

var manSpec = spec("man", "gnu",
	"P|pager= exec:man -P runs a program", "H|html=? exec:man -H runs a browser", "X|gxditview=?",
	"p|preprocessor= exec:man -p runs preprocessors", "C|config-file= path", "M|manpath=", "S|s|sections=",
	"e|extension=", "L|locale=", "m|systems=", "R|recode=", "E|encoding=", "r|prompt=", "T|troff-device=?",
	"a|all", "c|catman", "d|debug", "D|default", "f|whatis", "k|apropos", "K|global-apropos", "l|local-file",
	"w|where|path|location", "W|where-cat|location-cat", "Z|ditroff", "t|troff", "u|update", "i|ignore-case",
	"I|match-case", "regex", "wildcard", "names-only", "no-subpages", "no-hyphenation", "nh", "no-justification",
	"nj", "7|ascii", "h|help", "V|version", "warnings=?")

// gawk, which stops at its first operand (the program); mawk (Debian's
// default awk) takes -W options, judged below.
var awkSpec = spec("awk", "abbrev strict",
	"f|file= script:awk -f runs a program file whose content is not analysed",
	"E|exec= script:awk -E runs a program file whose content is not analysed",
	"i|include= script:awk -i runs a program file whose content is not analysed",
	"l|load= exec:awk -l loads a shared library", "e|source=", "v|assign=", "F|field-separator=",
	"W=", "b|characters-as-bytes", "c|traditional", "C|copyright", "d|dump-variables=? writes:awk -d writes a file",
	"D|debug=? exec:awk -D runs the debugger, which reads commands", "g|gen-pot", "h|help", "k|csv",
	"L|lint=?", "M|bignum", "N|use-lc-numeric", "n|non-decimal-data", "O|optimize",
	"o|pretty-print=? writes:awk -o writes a file", "p|profile=? writes:awk -p writes a profile file",
	"P|posix", "r|re-interval", "s|no-optimize", "S|sandbox", "t|lint-old", "V|version", "I|trace", "Y")

var uniqSpec = spec("uniq", "gnu",
	"c|count", "d|repeated", "D|all-repeated=?", "f|skip-fields=", "group=?", "i|ignore-case", "s|skip-chars=",
	"u|unique", "z|zero-terminated", "w|check-chars=", "help", "version")

var tarSpec = spec("tar", "abbrev permute",
	"to-command= exec:tar --to-command runs a program", "checkpoint-action= exec:tar --checkpoint-action can run a program",
	"I|use-compress-program= exec:tar -I runs a program", "F|info-script|new-volume-script= exec:tar -F runs a script",
	"rsh-command= exec:tar --rsh-command runs a program", "rmt-command= exec:tar --rmt-command runs a program",
	"C|directory= dir", "T|files-from= path", "X|exclude-from= path", "f|file= path", "index-file= write",
	"g|listed-incremental= write", "K|starting-file=", "N|newer|after-date=", "newer-mtime=", "V|label=",
	"b|blocking-factor=", "H|format=", "L|tape-length=", "transform|xform=", "exclude=", "owner=", "group=",
	"mode=", "mtime=", "strip-components=", "checkpoint=?", "warning=", "occurrence=?", "level=", "quoting-style=",
	"record-size=", "volno-file= write", "backup=?", "suffix=", "sort=", "atime-preserve=?",
	"c|create", "x|extract|get", "t|list", "r|append", "u|update", "A|catenate|concatenate", "d|diff|compare", "delete",
	"test-label", "v|verbose", "z|gzip|gunzip|ungzip", "j|bzip2", "J|xz", "Z|compress|uncompress", "lzip", "lzma",
	"lzop", "zstd", "a|auto-compress", "k|keep-old-files", "keep-newer-files", "overwrite", "overwrite-dir",
	"remove-files", "U|unlink-first", "recursive-unlink", "W|verify", "O|to-stdout", "p|preserve-permissions|same-permissions",
	"s|preserve-order|same-order", "S|sparse", "P|absolute-names", "h|dereference", "hard-dereference", "l|check-links",
	"B|read-full-records", "i|ignore-zeros", "M|multi-volume", "R|block-number", "m|touch", "w|interactive|confirmation",
	"o", "no-same-owner", "same-owner", "numeric-owner", "no-same-permissions", "show-transformed-names", "totals=?",
	"wildcards", "no-wildcards", "anchored", "no-anchored", "ignore-case", "no-ignore-case", "exclude-vcs",
	"exclude-caches", "one-file-system", "null", "no-null", "verbatim-files-from", "no-recursion", "recursion",
	"utc", "full-time", "show-omitted-dirs", "ignore-failed-read", "skip-old-files", "posix", "help", "usage", "version")

var makeSpec = spec("make", "abbrev permute",
	"C|directory= dir", "f|file|makefile= path", "I|include-dir= path", "o|old-file|assume-old=",
	"W|what-if|new-file|assume-new=", "j|jobs=?", "l|load-average|max-load=?", "O|output-sync=?", "debug=?",
	"eval= exec:make --eval runs make text", "jobserver-auth=", "shuffle=?", "b", "m", "B|always-make", "d", "e|environment-overrides",
	"E", "h|help", "i|ignore-errors", "k|keep-going", "L|check-symlink-times", "n|just-print|dry-run|recon",
	"p|print-data-base", "q|question", "r|no-builtin-rules", "R|no-builtin-variables", "s|silent|quiet",
	"no-silent", "S|no-keep-going|stop", "t|touch", "trace", "v|version", "w|print-directory", "no-print-directory",
	"warn-undefined-variables")

// gitGlobalSpec is git's own options, before the subcommand; git takes
// them exactly (no prefixes) and rejects unknown ones.
var gitGlobalSpec = spec("git", "strict",
	"C= dir", "c= exec:git -c sets configuration (core.pager, core.fsmonitor, ...) that runs programs",
	"config-env= exec:git --config-env sets configuration that runs programs",
	"exec-path=? exec:git --exec-path runs git commands from another directory",
	"git-dir= exec:git --git-dir selects a repository whose configuration runs programs",
	"work-tree= exec:git --work-tree selects a repository whose configuration runs programs",
	"namespace=", "super-prefix=", "list-cmds=", "attr-source=",
	"html-path", "man-path", "info-path", "p|paginate", "P|no-pager", "no-replace-objects", "no-lazy-fetch", "bare",
	"literal-pathspecs", "glob-pathspecs", "noglob-pathspecs", "icase-pathspecs", "no-optional-locks", "v|version", "h|help",
	"no-advice")

// gitDangerous are the long options of git subcommands that run programs,
// write files or read files outside the repository. git accepts unique
// prefixes of its subcommands' long options, so a prefix of one of these
// is judged as the option itself.
var gitDangerous = map[string]optDef{
	"output":                {effect: effWrite, detail: "git --output writes a file"},
	"output-directory":      {effect: effWrite, detail: "git --output-directory writes files"},
	"ext-diff":              {effect: effExec, detail: "git --ext-diff runs an external diff program"},
	"textconv":              {effect: effExec, detail: "git --textconv runs the text conversion programs of .gitattributes"},
	"open-files-in-pager":   {effect: effExec, detail: "git grep -O runs a pager program"},
	"no-index":              {effect: effReads, detail: "git diff --no-index compares files outside the repository"},
	"contents":              {effect: effPath},
	"upload-pack":           {effect: effExec, detail: "git --upload-pack runs a program"},
	"receive-pack":          {effect: effExec, detail: "git --receive-pack runs a program"},
	"exec":                  {effect: effExec, detail: "git --exec runs a program"},
	"template":              {effect: effExec, detail: "git --template installs hooks, which run programs"},
	"config":                {effect: effExec, detail: "git -c sets configuration that runs programs"},
	"separate-git-dir":      {effect: effExec, detail: "git --separate-git-dir places a repository elsewhere"},
	"file":                  {effect: effPath},
	"ignore-revs-file":      {effect: effPath},
	"pathspec-from-file":    {effect: effPath},
	"stdin-packs":           {},
	"word-diff-regex":       {},
	"orderfile":             {effect: effPath},
	"exclude-from":          {effect: effPath},
	"exclude-per-directory": {},
	"show-signature":        {effect: effExec, detail: "git --show-signature runs the signature program (gpg.program) repository configuration names"},
	"filters":               {effect: effExec, detail: "git cat-file --filters runs the filter programs of .gitattributes"},
}

// gitSafe are the long options of git's read-only subcommands that do
// nothing the gate must judge.
var gitSafe = set("oneline", "graph", "decorate", "decorate-refs", "decorate-refs-exclude", "no-decorate", "stat", "numstat",
	"shortstat", "dirstat", "summary", "name-only", "name-status", "patch", "no-patch", "raw", "patch-with-raw",
	"patch-with-stat", "cached", "staged", "merge-base", "cc", "combined-all-paths", "unified", "word-diff", "color-words",
	"color", "no-color", "color-moved", "no-color-moved", "ignore-space-change", "ignore-all-space", "ignore-space-at-eol",
	"ignore-blank-lines", "ignore-cr-at-eol", "ignore-submodules", "minimal", "patience", "histogram", "diff-algorithm",
	"anchored", "indent-heuristic", "no-indent-heuristic", "function-context", "text", "binary", "full-index", "abbrev",
	"no-abbrev", "abbrev-commit", "no-abbrev-commit", "relative", "no-relative", "src-prefix", "dst-prefix", "no-prefix",
	"default-prefix", "line-prefix", "inter-hunk-context", "exit-code", "quiet", "check", "find-renames", "find-copies",
	"find-copies-harder", "irreversible-delete", "no-renames", "rename-empty", "no-rename-empty", "diff-filter",
	"pickaxe-all", "pickaxe-regex", "ws-error-highlight", "no-ext-diff", "no-textconv", "submodule", "stat-width",
	"stat-name-width", "stat-count", "compact-summary", "pretty", "format", "encoding", "expand-tabs", "no-expand-tabs",
	"notes", "no-notes", "show-notes", "relative-date", "date", "parents", "children", "left-right",
	"cherry-mark", "cherry-pick", "boundary", "max-count", "skip", "since", "after", "until", "before", "since-as-filter",
	"author", "committer", "grep-reflog", "grep", "all-match", "invert-grep", "regexp-ignore-case", "basic-regexp",
	"extended-regexp", "fixed-strings", "perl-regexp", "remove-empty", "merges", "no-merges", "min-parents",
	"max-parents", "no-min-parents", "no-max-parents", "first-parent", "exclude-first-parent-only", "not", "all",
	"branches", "tags", "remotes", "glob", "exclude", "reflog", "alternate-refs", "single-worktree", "ignore-missing",
	"bisect", "stdin", "walk-reflogs", "merge", "follow", "full-diff", "log-size", "simplify-by-decoration",
	"full-history", "dense", "sparse", "simplify-merges", "ancestry-path", "show-pulls", "topo-order", "date-order",
	"author-date-order", "reverse", "no-walk", "do-walk", "show-linear-break", "mailmap", "use-mailmap", "no-mailmap",
	"no-use-mailmap", "source", "clear-decorations", "short", "porcelain", "long", "branch", "show-stash",
	"ahead-behind", "no-ahead-behind", "untracked-files", "ignored", "column", "no-column", "renames",
	"find-renames", "null", "verbose", "line-porcelain", "incremental", "root", "show-stats", "score-debug",
	"show-name", "show-number", "show-email", "line-number", "ignore-rev", "minimal", "progress", "no-progress",
	"ignore-case", "word-regexp", "invert-match", "files-with-matches", "name-only", "files-without-match", "count",
	"heading", "break", "show-function", "context", "after-context", "before-context", "function-context",
	"threads", "max-depth", "recurse-submodules", "untracked", "no-index-never", "exclude-standard", "and", "or",
	"all-match", "only-matching", "column", "full-name", "list", "contains", "no-contains", "merged", "no-merged",
	"points-at", "sort", "format", "remote", "show-current", "deleted", "modified", "others", "killed", "directory",
	"no-empty-directory", "unmerged", "stage", "error-unmatch", "with-tree", "eol", "deduplicate", "debug",
	"name-only", "long", "full-tree", "object-only", "show-toplevel", "show-prefix", "show-cdup", "git-dir",
	"git-common-dir", "absolute-git-dir", "is-inside-work-tree", "is-inside-git-dir", "is-bare-repository",
	"is-shallow-repository", "short", "verify", "symbolic", "symbolic-full-name", "abbrev-ref", "tags", "always",
	"first-parent", "exact-match", "candidates", "dirty", "broken", "match", "contains", "no-prefix", "numbered",
	"email", "summary", "group", "sha1-name", "no-color", "more", "list", "heads", "topics", "independent",
	"merge-base", "sparse", "creation-factor", "left-only", "right-only", "no-dual-color", "dual-color",
	"count", "objects", "annotate", "batch", "batch-check", "batch-all-objects", "follow-symlinks",
	"path", "tree", "recursive", "header", "no-commit-id", "always", "pretty", "version", "help",
	"show-origin", "show-scope", "get", "get-all", "get-regexp", "get-urlmatch", "get-color", "get-colorbool",
	"name-only", "includes", "no-includes", "type", "default", "local", "global", "system", "worktree", "blob",
	"z", "v", "x", "porcelain-v2", "progress", "timestamp", "raw-timestamp", "line-range", "lines", "dir-stat")

// gitSubcommand judges the options of a git subcommand: a prefix of a
// dangerous option is that option; a prefix of no known option asks.
func gitSubcommandOptions(cmd *Command, w *walker, sub string, args []Word) []Word {
	var operands []Word
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.Value
		if !a.Literal || v == "-" || !hasDash(v) {
			operands = append(operands, a)
			continue
		}
		if v == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if v[1] != '-' {
			// Short options: the few that run programs or name files.
			c := shortCluster(v)
			switch {
			case sub == "grep" && (strings.HasPrefix(v, "-O") || strings.Contains(c, "O")):
				cmd.hazardAt(HazardExec, "git grep -O runs a pager program", v)
			case sub == "grep" && v == "-f" && i+1 < len(args):
				i++
				w.optPath(cmd, args[i], false)
			case sub == "grep" && strings.HasPrefix(v, "-f") && len(v) > 2:
				w.optPath(cmd, Word{Value: v[2:], Literal: true}, false)
			case sub == "blame" && v == "-S" && i+1 < len(args):
				i++
				w.optPath(cmd, args[i], false)
			}
			continue
		}
		name, val, has := strings.Cut(v[2:], "=")
		if (strings.HasPrefix("format", name) || strings.HasPrefix("pretty", name)) && len(name) >= 3 && strings.Contains(val, "%G") {
			cmd.hazardAt(HazardExec, "git --format %G verifies signatures, running the program (gpg.program) repository configuration names", v)
		}
		if _, safe := gitSafe[name]; safe {
			continue
		}
		d, exact := gitDangerous[name]
		matched := ""
		if exact {
			matched = name
		} else if name != "" {
			for full, dd := range gitDangerous {
				if strings.HasPrefix(full, name) && dd.effect != effNone {
					if matched == "" || full < matched {
						matched, d = full, dd
					}
				}
			}
		}
		if matched != "" {
			valw := Word{Value: val, Literal: true, Tilde: strings.HasPrefix(val, "~")}
			switch d.effect {
			case effPath:
				if !has && i+1 < len(args) {
					i++
					valw = args[i]
					has = true
				}
				if has {
					w.optPath(cmd, valw, false)
				}
			case effWrite:
				cmd.hazardAt(HazardWrite, d.detail, v)
				if has {
					w.optPath(cmd, valw, true)
				}
			case effExec:
				cmd.hazardAt(HazardExec, d.detail, v)
			case effReads:
				cmd.hazardAt(HazardRead, d.detail, v)
			}
			continue
		}
		known := false
		for full := range gitSafe {
			if strings.HasPrefix(full, name) {
				known = true
				break
			}
		}
		if !known && !strings.HasPrefix(name, "no-") {
			cmd.hazardAt(HazardUnsupported, "git "+sub+": unknown option --"+name+"; the analyser cannot tell what it does", v)
		} else if !known {
			// --no-X negates a known option; X must be known.
			rest := strings.TrimPrefix(name, "no-")
			ok := false
			for full := range gitSafe {
				if strings.HasPrefix(full, rest) {
					ok = true
					break
				}
			}
			if !ok {
				cmd.hazardAt(HazardUnsupported, "git "+sub+": unknown option --"+name+"; the analyser cannot tell what it does", v)
			}
		}
	}
	return operands
}

func hasDash(v string) bool { return len(v) > 1 && v[0] == '-' }

// optionSpecs are the programs judged through their option tables.
var optionSpecs = map[string]*optSpec{
	"sed": sedSpec, "gsed": sedSpec, "sort": sortSpec, "grep": grepSpec, "egrep": grepSpec, "fgrep": grepSpec,
	"zgrep": grepSpec, "rg": rgSpec, "fd": fdSpec, "fdfind": fdSpec, "tree": treeSpec, "less": lessSpec,
	"date": dateSpec, "hostname": hostnameSpec, "man": manSpec, "awk": awkSpec, "gawk": awkSpec, "mawk": awkSpec, "nawk": awkSpec,
	"uniq": uniqSpec, "tar": tarSpec, "bsdtar": tarSpec, "make": makeSpec, "gmake": makeSpec,
	"unzip": unzipSpec, "cpio": cpioSpec, "patch": patchSpec,
}

func init() {
	for name, s := range compressors {
		optionSpecs[name] = s
	}
}

// specified judges a program with an option table: its options, then
// what its operands are.
func (w *walker) specified(cmd *Command, base string, s *optSpec) {
	p := w.judgeOptions(cmd, s, cmd.Args[1:])
	ops := p.operands
	write := writers[base]
	switch s {
	case sedSpec:
		w.sedProgram(cmd, p)
		return
	case awkSpec:
		w.awkProgram(cmd, p)
		return
	case grepSpec, rgSpec:
		if !p.has("e", "f") && len(ops) > 0 {
			ops = ops[1:] // the pattern
		}
	case uniqSpec:
		if len(ops) >= 2 {
			cmd.hazardAt(HazardWrite, "uniq writes its second operand", ops[1].Value)
			cmd.Paths = append(cmd.Paths, pathArgs(ops[1:2], true)...)
			ops = ops[:1]
		}
	case dateSpec:
		for _, o := range ops {
			if !strings.HasPrefix(o.Value, "+") {
				cmd.hazardAt(HazardSystem, "date with an operand sets the clock", o.Value)
			}
		}
		return
	case hostnameSpec:
		for _, o := range ops {
			cmd.hazardAt(HazardSystem, "hostname with an operand sets the host name", o.Value)
		}
		return
	case lessSpec:
		for _, o := range ops {
			if strings.HasPrefix(o.Value, "+") {
				cmd.hazardAt(HazardExec, "less +command runs pager commands, which include shell escapes", o.Value)
			}
		}
	case makeSpec:
		// NAME=value operands override make variables (SHELL,
		// MAKEFLAGS, .SHELLFLAGS, CC, ...) whose values run.
		var rest []Word
		for _, o := range ops {
			if !o.Literal || strings.Contains(o.Value, "=") {
				cmd.hazardAt(HazardEnv, "make "+o.Value+" overrides a make variable, which can change what runs", o.Value)
				continue
			}
			rest = append(rest, o)
		}
		ops = rest
	case tarSpec:
		if len(cmd.Args) > 1 && cmd.Args[1].Literal && !strings.HasPrefix(cmd.Args[1].Value, "-") {
			// Old-style letters without a dash (tar xf a.tar): read
			// as a cluster.
			old := Word{Value: "-" + cmd.Args[1].Value, Literal: true}
			p = w.judgeOptions(cmd, s, append([]Word{old}, cmd.Args[2:]...))
			ops = p.operands
		}
	}
	cmd.Paths = append(cmd.Paths, implicitWrites(base, p)...)
	if p.unsure {
		// An option the table does not know may have taken an operand as
		// its value: judge every word as a path.
		ops = nil
		for _, a := range cmd.Args[1:] {
			if !strings.HasPrefix(a.Value, "-") {
				ops = append(ops, a)
			}
		}
	}
	n := len(cmd.Paths)
	cmd.Paths = append(cmd.Paths, pathArgs(ops, write)...)
	if recursive := (s == grepSpec && (p.has("r", "R") || p.value("d") == "recurse")) || s == rgSpec; recursive {
		// Every file beneath a directory operand (the working directory
		// when none is given) is read: the judge looks at what it holds.
		for i := n; i < len(cmd.Paths); i++ {
			cmd.Paths[i].Tree = true
		}
		if len(cmd.Paths) == n {
			cmd.Paths = append(cmd.Paths, PathArg{Path: ".", Tree: true})
		}
	}
	if write {
		// A program that writes where it is told writes into its -C
		// directory and its option values too (tar -x -C DIR).
		for i := range cmd.Paths {
			cmd.Paths[i].Write = true
		}
	}
}
