package approval

import "github.com/toolgate/toolgate/internal/textdiff"

// UnifiedDiff returns a unified diff (three lines of context) from old to
// new for the file name, or "" when they are equal.
func UnifiedDiff(name, old, new string) string {
	return textdiff.Unified("a/"+name, "b/"+name, old, new, 3)
}

// ArgsDiff is the diff a person sees for an edit or write call when the
// worker did not compute one against the file: for edit, old_string to
// new_string; for write, the whole content as added. Other tools get "".
func ArgsDiff(tool string, args map[string]any) string {
	path, _ := args["path"].(string)
	if path == "" {
		path, _ = args["file_path"].(string)
	}
	switch tool {
	case "edit", "edit_file":
		o, _ := args["old_string"].(string)
		n, _ := args["new_string"].(string)
		return UnifiedDiff(path, o, n)
	case "write", "write_file":
		c, _ := args["content"].(string)
		return UnifiedDiff(path, "", c)
	}
	return ""
}
