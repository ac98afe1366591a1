package builtin

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

// skillFile is the file that makes a directory a skill.
const skillFile = "SKILL.md"

// maxSkillDepth bounds how deep below the skills directory SKILL.md files
// are looked for.
const maxSkillDepth = 4

// skillInfo is one skill found under the skills directory.
type skillInfo struct {
	Name        string // the name in its front matter, else its directory
	Description string
	Rel         string // SKILL.md relative to the skills directory
}

func (s *set) skillTool() *tools.Tool {
	skills, err := s.scanSkills(context.Background())
	var desc strings.Builder
	desc.WriteString("Load a skill: instructions for a kind of task, from a SKILL.md file. Call with skill set to a name to get its text; without it, to list the skills. ")
	switch {
	case err != nil || len(skills) == 0:
		desc.WriteString("No skills were available at start-up.")
	default:
		desc.WriteString("Available skills:")
		for _, sk := range skills {
			desc.WriteString("\n- " + sk.Name)
			if sk.Description != "" {
				desc.WriteString(": " + sk.Description)
			}
		}
	}
	return &tools.Tool{
		Name:           tooldef.Skill.Name,
		Aliases:        slices.Clone(tooldef.Skill.Aliases),
		Description:    desc.String(),
		Parameters:     tooldef.Skill.MustSchema(nil),
		Kind:           policy.Kind(tooldef.Skill.Kind),
		DefaultTimeout: 30 * time.Second,
		MaxTimeout:     60 * time.Second,
		Annotations:    tools.Annotations{ReadOnly: true, Idempotent: true},
		Handler:        tools.HandlerFunc(s.skill),
	}
}

// skillsWorkspace opens the skills directory as a workspace of its own, so
// that skill files are confined to it wherever it lies.
func (s *set) skillsWorkspace() (*workspace.Workspace, error) {
	fi, err := os.Stat(s.cfg.SkillsDir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: s.cfg.SkillsDir, Err: workspace.ErrNotDir}
	}
	return workspace.Open(s.cfg.SkillsDir)
}

// scanSkills lists the skills, sorted by name.
func (s *set) scanSkills(ctx context.Context) ([]skillInfo, error) {
	ws, err := s.skillsWorkspace()
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	var out []skillInfo
	_, err = ws.Walk(ctx, ".", workspace.WalkOptions{NoIgnore: true, SkipDir: func(rel string) bool {
		return strings.Count(rel, "/") >= maxSkillDepth
	}}, nil, func(e *workspace.Entry) error {
		if e.Name != skillFile {
			return nil
		}
		info := skillInfo{Name: path.Dir(e.Rel), Rel: e.Rel}
		if info.Name == "." {
			return nil // a SKILL.md at the top names no skill
		}
		if data, _, err := ws.ReadFile(e.Rel, 1<<20, nil); err == nil {
			name, d := frontMatter(data)
			if name != "" {
				info.Name = name
			}
			info.Description = d
		}
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b skillInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// frontMatter reads name and description from a leading --- block.
func frontMatter(data []byte) (name, desc string) {
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "---" {
		return "", ""
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "---" {
			break
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch strings.TrimSpace(k) {
		case "name":
			name = v
		case "description":
			desc = v
		}
	}
	return name, desc
}

func (s *set) skill(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	want := tools.ArgString(c.Args, "skill")
	skills, err := s.scanSkills(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return failf("skill: no skills directory %s: %v", s.cfg.SkillsDir, err), nil
	}
	var names []string
	for _, sk := range skills {
		names = append(names, sk.Name)
	}
	if want == "" {
		var b strings.Builder
		if len(skills) == 0 {
			fmt.Fprintf(&b, "No skills in %s.\n", s.cfg.SkillsDir)
		}
		for _, sk := range skills {
			b.WriteString(sk.Name)
			if sk.Description != "" {
				b.WriteString(": " + sk.Description)
			}
			b.WriteByte('\n')
		}
		return &tools.Output{Content: b.String(), Metadata: map[string]any{"skills": names}}, nil
	}
	i := slices.IndexFunc(skills, func(sk skillInfo) bool { return sk.Name == want })
	if i < 0 {
		avail := "none"
		if len(names) > 0 {
			avail = strings.Join(names, ", ")
		}
		return &tools.Output{IsError: true, Content: fmt.Sprintf("skill %q not found; available skills: %s", want, avail), Metadata: map[string]any{"skills": names}}, nil
	}
	sk := skills[i]
	ws, err := s.skillsWorkspace()
	if err != nil {
		return failf("skill: no skills directory %s: %v", s.cfg.SkillsDir, err), nil
	}
	defer ws.Close()
	data, f, err := ws.ReadFile(sk.Rel, s.cfg.MaxReadSize, c.CheckPath)
	if err != nil {
		return fileFailure("skill", sk.Rel, err)
	}
	return &tools.Output{
		Content: string(data),
		Metadata: map[string]any{
			"skill": sk.Name,
			"path":  f.Real,
			"dir":   path.Dir(f.Real),
		},
	}, nil
}
