package builtin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
)

func (s *set) writeTool() *tools.Tool {
	return &tools.Tool{
		Name:    tooldef.Write.Name,
		Aliases: slices.Clone(tooldef.Write.Aliases),
		Description: "Write a file of the workspace, replacing it whole if it exists. Missing parent directories are created. " +
			"The replacement is atomic (a temporary file in the same directory renamed over the target) and keeps the mode of an existing file. " +
			"Reports the bytes written. To change part of a file, use edit.",
		Parameters:     tooldef.Write.MustSchema(nil),
		Kind:           policy.Kind(tooldef.Write.Kind),
		DefaultTimeout: 30 * time.Second,
		MaxTimeout:     120 * time.Second,
		Annotations:    tools.Annotations{Destructive: true, Idempotent: true},
		Handler:        tools.HandlerFunc(s.write),
	}
}

func (s *set) write(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	path := tools.ArgString(c.Args, "path")
	content := tools.ArgString(c.Args, "content")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := s.ws.WriteFile(path, []byte(content), 0o644, c.CheckPath)
	if err != nil {
		return fileFailure("write", path, err)
	}
	shown := s.display(res.Real)
	verb := "replaced"
	if res.Created {
		verb = "created"
	}
	return &tools.Output{
		Content: fmt.Sprintf("Wrote %d bytes to %s (%s, %d %s, mode %04o).", res.Bytes, shown, verb, countLines([]byte(content)), plural(countLines([]byte(content)), "line", "lines"), res.Mode.Perm()),
		Metadata: map[string]any{
			"path":    shown,
			"bytes":   res.Bytes,
			"created": res.Created,
			"mode":    fmt.Sprintf("%04o", res.Mode.Perm()),
		},
	}, nil
}

func (s *set) editTool() *tools.Tool {
	return &tools.Tool{
		Name:    tooldef.Edit.Name,
		Aliases: slices.Clone(tooldef.Edit.Aliases),
		Description: "Replace exact text in a file of the workspace: old_string becomes new_string. They must differ. " +
			"old_string must occur exactly once unless replace_all is true; if it occurs several times, add surrounding lines to make it unique. " +
			"Match the file's text exactly, including indentation, without the line-number prefixes read shows. " +
			"Returns the number of replacements and a unified diff of the change. The file is replaced atomically and keeps its mode.",
		Parameters:     tooldef.Edit.MustSchema(nil),
		Kind:           policy.Kind(tooldef.Edit.Kind),
		DefaultTimeout: 30 * time.Second,
		MaxTimeout:     120 * time.Second,
		Annotations:    tools.Annotations{Destructive: true},
		Handler:        tools.HandlerFunc(s.edit),
	}
}

func (s *set) edit(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	path := tools.ArgString(c.Args, "path")
	oldS := tools.ArgString(c.Args, "old_string")
	newS := tools.ArgString(c.Args, "new_string")
	all := tools.ArgBool(c.Args, "replace_all")
	switch {
	case oldS == newS:
		return failf("edit %s: old_string and new_string are the same; there is nothing to change", path), nil
	case oldS == "":
		return failf("edit %s: old_string is empty; use write to create a file or replace it whole", path), nil
	}
	data, f, err := s.ws.ReadFile(path, s.cfg.MaxReadSize, c.CheckPath)
	if err != nil {
		return fileFailure("edit", path, err)
	}
	shown := s.display(f.Real)
	if isBinary(data) {
		return failf("edit %s: the file is binary; edit changes text files only", shown), nil
	}
	text := string(data)
	n := strings.Count(text, oldS)
	switch {
	case n == 0:
		hint := ""
		if strings.Contains(oldS, "\t") != strings.Contains(text, "\t") || strings.Contains(text, "\r\n") {
			hint = " (check whitespace: tabs, spaces and line endings must match exactly)"
		}
		return &tools.Output{IsError: true, Content: fmt.Sprintf("edit %s: old_string was not found in the file%s; read the file and copy the text exactly, without line-number prefixes", shown, hint), Metadata: map[string]any{"path": shown, "matches": 0}}, nil
	case n > 1 && !all:
		return &tools.Output{IsError: true, Content: fmt.Sprintf("edit %s: old_string matches %d times; add surrounding context to old_string to make it unique, or set replace_all to replace all %d", shown, n, n), Metadata: map[string]any{"path": shown, "matches": n}}, nil
	}
	var updated string
	if all {
		updated = strings.ReplaceAll(text, oldS, newS)
	} else {
		updated = strings.Replace(text, oldS, newS, 1)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := s.ws.WriteFile(f.Real, []byte(updated), 0o644, c.CheckPath)
	if err != nil {
		return fileFailure("edit", path, err)
	}
	diff := unifiedDiff(shown, text, updated, 3)
	return &tools.Output{
		Content: fmt.Sprintf("Replaced %d %s in %s.\n\n%s", n, plural(n, "occurrence", "occurrences"), shown, diff),
		Metadata: map[string]any{
			"path":         shown,
			"replacements": n,
			"bytes":        res.Bytes,
		},
	}, nil
}
