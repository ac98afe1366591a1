package approval

import (
	"github.com/toolgate/toolgate/pkg/textdiff"
	"github.com/toolgate/toolgate/pkg/tooldef"
)

// UnifiedDiff returns a unified diff (three lines of context) from old to
// new for the file name, or "" when they are equal.
func UnifiedDiff(name, old, new string) string {
	return textdiff.Unified("a/"+name, "b/"+name, old, new, 3)
}

// ArgsDiff is the diff a person sees for a call of a built-in tool that
// writes a file when the worker did not compute one against the file: for
// edit, old_string to new_string; for write, the whole content as added
// (the tool's definition says which argument is which). Other tools get
// "".
func ArgsDiff(tool string, args map[string]any) string {
	d, ok := tooldef.Lookup(tool)
	if !ok {
		return ""
	}
	var path string
	if a := d.Arg(tooldef.Path); a != nil {
		path, _ = args[a.Name].(string)
	}
	if path == "" {
		path, _ = args["file_path"].(string) // a hook's name for it
	}
	text := func(r tooldef.Role) string {
		s, _ := args[d.Arg(r).Name].(string)
		return s
	}
	switch {
	case d.Arg(tooldef.OldText) != nil && d.Arg(tooldef.NewText) != nil:
		return UnifiedDiff(path, text(tooldef.OldText), text(tooldef.NewText))
	case d.Arg(tooldef.Content) != nil:
		return UnifiedDiff(path, "", text(tooldef.Content))
	}
	return ""
}
