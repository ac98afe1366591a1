// Package builtin holds toolgate's built-in file tools: read, write, edit,
// ls, glob, grep and skill. Every file they touch is reached through
// package workspace, confined to the workspace and the extra allowed
// roots, and every file they open or create is judged by the call's
// CheckPath when the policy sets one. A tool's own failure (a missing
// file, a bad regex) is an Output with IsError set whose content names
// the path and the cause; a path the policy refuses is returned as the
// policy's error.
package builtin

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxReadSize   = 10 << 20 // bytes
	DefaultMaxLineLength = 2000     // characters per line shown by read
	DefaultReadLimit     = 2000     // lines shown by read
	DefaultListLimit     = 1000     // entries shown by ls
	DefaultGlobLimit     = 100      // paths returned by glob
	DefaultSkillsDir     = ".skills"
)

// Config configures the built-in tools.
type Config struct {
	// Workspace is the directory relative paths are resolved against and
	// the first allowed root. Required.
	Workspace string `yaml:"workspace" json:"workspace"`
	// Roots are extra directories the tools may reach by absolute path
	// (the policy's allowed_paths).
	Roots []string `yaml:"roots,omitempty" json:"roots,omitempty"`
	// SkillsDir holds one directory per skill, each with a SKILL.md;
	// relative to the workspace when relative. Empty means ".skills".
	SkillsDir string `yaml:"skills_dir,omitempty" json:"skills_dir,omitempty"`
	// MaxReadSize is the largest file read, edit and grep accept, in
	// bytes; larger files are refused with their size. Zero means 10 MiB.
	MaxReadSize int64 `yaml:"max_read_size,omitempty" json:"max_read_size,omitempty"`
	// MaxLineLength clips longer lines shown by read and grep, in
	// characters. Zero means 2000.
	MaxLineLength int `yaml:"max_line_length,omitempty" json:"max_line_length,omitempty"`
	// ReadLimit is how many lines read shows when the call sets no limit.
	// Zero means 2000.
	ReadLimit int `yaml:"read_limit,omitempty" json:"read_limit,omitempty"`
	// ListLimit is how many entries ls shows when the call sets no limit.
	// Zero means 1000.
	ListLimit int `yaml:"list_limit,omitempty" json:"list_limit,omitempty"`
	// GlobLimit is how many paths glob returns when the call sets no
	// limit. Zero means 100.
	GlobLimit int `yaml:"glob_limit,omitempty" json:"glob_limit,omitempty"`
	// MaxOutput bounds each tool's output in characters. Zero means
	// tools.DefaultMaxOutput.
	MaxOutput int `yaml:"max_output,omitempty" json:"max_output,omitempty"`
}

// Validate names the field that is wrong.
func (c Config) Validate() error {
	switch {
	case c.Workspace == "":
		return errors.New("builtin config: workspace: required")
	case c.MaxReadSize < 0:
		return errors.New("builtin config: max_read_size: must not be negative")
	case c.MaxLineLength < 0:
		return errors.New("builtin config: max_line_length: must not be negative")
	case c.ReadLimit < 0:
		return errors.New("builtin config: read_limit: must not be negative")
	case c.ListLimit < 0:
		return errors.New("builtin config: list_limit: must not be negative")
	case c.GlobLimit < 0:
		return errors.New("builtin config: glob_limit: must not be negative")
	case c.MaxOutput < 0:
		return errors.New("builtin config: max_output: must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxReadSize == 0 {
		c.MaxReadSize = DefaultMaxReadSize
	}
	if c.MaxLineLength == 0 {
		c.MaxLineLength = DefaultMaxLineLength
	}
	if c.ReadLimit == 0 {
		c.ReadLimit = DefaultReadLimit
	}
	if c.ListLimit == 0 {
		c.ListLimit = DefaultListLimit
	}
	if c.GlobLimit == 0 {
		c.GlobLimit = DefaultGlobLimit
	}
	if c.MaxOutput == 0 {
		c.MaxOutput = tools.DefaultMaxOutput
	}
	if c.SkillsDir == "" {
		c.SkillsDir = DefaultSkillsDir
	}
	if !filepath.IsAbs(c.SkillsDir) {
		c.SkillsDir = filepath.Join(c.Workspace, c.SkillsDir)
	}
	return c
}

// set is the shared state of the tools of one Register.
type set struct {
	cfg Config
	ws  *workspace.Workspace
}

// Register opens the workspace and the allowed roots and registers read,
// write, edit, ls, glob, grep and skill in reg. The roots stay open for the
// life of the process.
func Register(reg *tools.Registry, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	ws, err := workspace.Open(cfg.Workspace, cfg.Roots...)
	if err != nil {
		return fmt.Errorf("builtin: %w", err)
	}
	s := &set{cfg: cfg, ws: ws}
	ts := []*tools.Tool{s.readTool(), s.writeTool(), s.editTool(), s.lsTool(), s.globTool(), s.grepTool(), s.skillTool()}
	for _, t := range ts {
		t.Category = "builtin"
		if t.MaxOutput == 0 {
			t.MaxOutput = cfg.MaxOutput
		}
		if err := reg.Register(t); err != nil {
			return fmt.Errorf("builtin: %w", err)
		}
	}
	return nil
}

// --- outputs -----------------------------------------------------------

func failf(format string, a ...any) *tools.Output {
	return &tools.Output{IsError: true, Content: fmt.Sprintf(format, a...)}
}

// fileFailure turns an error of package workspace into the tool's result:
// a policy refusal stays an error for the pipeline to map, everything else
// becomes an error Output naming the path and the cause.
func fileFailure(tool, path string, err error) (*tools.Output, error) {
	if errors.Is(err, tools.ErrDenied) || errors.Is(err, tools.ErrApprovalRequired) {
		return nil, fmt.Errorf("%s %s: %w", tool, path, err)
	}
	code, msg := describe(path, err)
	return &tools.Output{IsError: true, Content: msg, Metadata: map[string]any{"error": code, "path": path}}, nil
}

// describe says what went wrong with path, for a model, and a short code.
func describe(path string, err error) (code, msg string) {
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	var tl *workspace.TooLargeError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "not_found", fmt.Sprintf("%s: no such file or directory", path)
	case errors.Is(err, workspace.ErrIsDir):
		return "is_directory", fmt.Sprintf("%s is a directory, not a file; use ls to list it", path)
	case errors.Is(err, workspace.ErrNotDir):
		return "not_directory", fmt.Sprintf("%s is not a directory; use read to read a file", path)
	case errors.Is(err, workspace.ErrOutside):
		return "outside_workspace", fmt.Sprintf("%s is outside the workspace: %v", path, cause)
	case errors.Is(err, workspace.ErrNotRegular):
		return "not_regular", fmt.Sprintf("%s is not a regular file (%v); only regular files can be read or written", path, cause)
	case errors.Is(err, workspace.ErrHardLink):
		return "hard_link", fmt.Sprintf("%s refused: %v", path, cause)
	case errors.As(err, &tl):
		return "too_large", fmt.Sprintf("%s is too large: %d bytes, the limit is %d bytes; read part of it with grep, or ask for the limit to be raised", path, tl.Size, tl.Max)
	case errors.Is(err, workspace.ErrInvalidPath):
		return "invalid_path", fmt.Sprintf("%q is not a valid path: %v", path, cause)
	case errors.Is(err, fs.ErrPermission):
		return "permission", fmt.Sprintf("%s: permission denied", path)
	}
	return "io", fmt.Sprintf("%s: %v", path, cause)
}

// --- schemas -----------------------------------------------------------

// display shows a path the way a model asked for it when relative, and
// relative to the workspace when it is inside it.
func (s *set) display(real string) string { return s.ws.Display(real) }

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// policyMaxBytes is the size bound of a read: the configured one, lowered
// by the policy's max_size for this call.
func policyMaxBytes(c *tools.Call, configured int64) int64 {
	if c.Decision != nil && c.Decision.MaxBytes > 0 && (configured <= 0 || c.Decision.MaxBytes < configured) {
		return c.Decision.MaxBytes
	}
	return configured
}

// policyMaxResults bounds a search or listing by the policy's max_results
// for this call; limit 0 means no other bound.
func policyMaxResults(c *tools.Call, limit int64) int64 {
	if c.Decision != nil && c.Decision.MaxResults > 0 && (limit <= 0 || int64(c.Decision.MaxResults) < limit) {
		return int64(c.Decision.MaxResults)
	}
	return limit
}
