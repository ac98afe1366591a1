package shell

import "strings"

// Git keeps every committed version of every file in its object store,
// and the staged one in its index. A path rule judges the paths a
// command names; git log -p, git show, git diff <empty-tree> HEAD or git
// cat-file print files the command never names. The analysis marks such
// commands (Command.History), and the gate asks about them wherever its
// rules deny any path: it cannot tell which files a repository's history
// holds. A command whose output is limited to the paths it names (a
// literal pathspec after --, or REV:PATH operands, each judged as a path)
// is not marked.

// gitNamesOnly are the output options that print names and counts, never
// content.
var gitNamesOnly = set("--stat", "--name-only", "--name-status", "--numstat", "--shortstat", "--summary", "--dirstat",
	"-s", "--no-patch", "--quiet", "--raw", "--compact-summary")

// gitObjectID reports whether v could be an abbreviated or full object
// name (4 to 64 hexadecimal digits), which may name a blob whose content
// git prints whatever the pathspec.
func gitObjectID(v string) bool {
	if len(v) < 4 || len(v) > 64 {
		return false
	}
	for i := range len(v) {
		c := v[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// gitPatch reports an option that makes git print patches (content).
func gitPatch(v string) bool {
	n, _, _ := strings.Cut(v, "=")
	switch n {
	case "-p", "-u", "--patch", "--cc", "-c", "--binary", "--full-diff", "--textconv", "--ext-diff", "--patch-with-stat",
		"--patch-with-raw", "--unified", "--word-diff", "--color-words", "--word-diff-regex", "--function-context", "-W",
		"--color-moved", "--remerge-diff", "--dd", "-m":
		return true
	}
	return strings.HasPrefix(v, "-U") || strings.HasPrefix(v, "-L") || (len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.ContainsAny(v[1:], "pu"))
}

// gitHistory judges what a read-only git subcommand prints from the object
// store or the index: it returns why the output may hold files the
// arguments do not name ("" when it may not), and the paths of REV:PATH
// operands, which git prints and the caller judges.
func gitHistory(sub string, rest []Word) (string, []PathArg) {
	var opts, revs, specs []Word
	dd := false
	for _, a := range rest {
		switch {
		case dd:
			specs = append(specs, a)
		case a.Literal && a.Value == "--":
			dd = true
		case a.Literal && strings.HasPrefix(a.Value, "-") && len(a.Value) > 1:
			opts = append(opts, a)
		default:
			revs = append(revs, a)
		}
	}
	has := func(pred func(string) bool) bool {
		for _, o := range opts {
			if pred(o.Value) {
				return true
			}
		}
		return false
	}
	patch := has(gitPatch)
	namesOnly := has(func(v string) bool {
		n, _, _ := strings.Cut(v, "=")
		return gitNamesOnly[n]
	})
	first := ""
	if len(revs) > 0 {
		first = revs[0].Value
	}
	content := false
	switch sub {
	case "log", "whatchanged", "reflog", "diff-tree", "diff-index", "diff-files":
		content = patch
	case "diff", "range-diff":
		content = patch || !namesOnly
		if has(func(v string) bool { return v == "--no-index" }) {
			return "", nil // two files on disk, judged as paths
		}
	case "grep":
		if len(revs) > 0 && !has(func(v string) bool { return v == "-e" || v == "-f" || strings.HasPrefix(v, "--and") }) {
			revs = revs[1:] // the pattern
		}
		content = !has(func(v string) bool {
			c := shortCluster(v)
			return strings.ContainsAny(c, "lLcq") || v == "--name-only" || v == "--files-with-matches" ||
				v == "--files-without-match" || v == "--count" || v == "--quiet"
		})
	case "cat-file":
		content = !has(func(v string) bool { return v == "-t" || v == "-s" || v == "-e" || v == "--batch-check" })
	case "show":
		content = true
	case "stash":
		content = (first == "show" || first == "list") && patch
		revs = nil
	case "notes":
		content = first == "show"
	case "archive", "bundle", "fast-export", "format-patch":
		return "git " + sub + " writes the repository's files out of its history", nil
	}
	if !content {
		return "", nil
	}
	why := "git " + sub + " prints files from the repository's history or index that its arguments do not name"
	var paths []PathArg
	objects := false
	for _, r := range revs {
		v := r.Value
		if !r.Literal {
			return why, nil
		}
		rev, p, ok := strings.Cut(v, ":")
		switch {
		case ok && !strings.ContainsAny(rev, "{}"):
			if strings.HasPrefix(v, ":") {
				// :PATH or :N:PATH, the staged version.
				p = strings.TrimPrefix(v, ":")
				if len(p) > 2 && p[1] == ':' && p[0] >= '0' && p[0] <= '3' {
					p = p[2:]
				}
			}
			if p != "" {
				paths = append(paths, PathArg{Path: p, File: true})
			}
		case ok:
			return why, nil
		case gitObjectID(v) || sub == "show" || sub == "cat-file" || sub == "notes":
			// An object name may be a blob, printed whatever the pathspec.
			objects = true
		}
	}
	if sub == "notes" || (sub == "grep" && len(revs) > 0) {
		objects = objects || sub == "notes"
	}
	if objects {
		return why, paths
	}
	if len(paths) > 0 && len(specs) == 0 && (sub == "show" || sub == "cat-file" || sub == "diff") {
		return "", paths // REV:PATH operands only
	}
	if len(specs) == 0 {
		return why, paths
	}
	for _, s := range specs {
		if !s.Literal || strings.HasPrefix(s.Value, ":") || strings.ContainsAny(s.Value, "*?[\\") {
			return why + " (a pathspec with magic or a glob)", paths
		}
		// Every version of the path git's history holds: the judge
		// requires it to be a file, since a directory (or a path gone
		// from the worktree) reaches every file under it.
		paths = append(paths, PathArg{Path: s.Value, Tilde: s.Tilde, File: true})
	}
	return "", paths
}
