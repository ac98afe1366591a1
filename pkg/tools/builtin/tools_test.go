package builtin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools"
)

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWrite(t *testing.T) {
	e := newEnv(t, Config{})
	out := e.ok(t, "write", map[string]any{"path": "deep/er/new.txt", "content": "hello\nworld\n"})
	if got := readFile(t, filepath.Join(e.dir, "deep/er/new.txt")); got != "hello\nworld\n" {
		t.Fatalf("content %q", got)
	}
	if out.Metadata["bytes"] != 12 || out.Metadata["created"] != true || !strings.Contains(out.Content, "Wrote 12 bytes to deep/er/new.txt") {
		t.Fatalf("output %q %v", out.Content, out.Metadata)
	}

	// Replacing keeps the mode and leaves no temporary file behind.
	p := e.write(t, "script.sh", "old")
	if err := os.Chmod(p, 0o751); err != nil {
		t.Fatal(err)
	}
	out = e.ok(t, "write_file", map[string]any{"path": "script.sh", "content": "#!/bin/sh\n"})
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o751 || out.Metadata["created"] != false || out.Metadata["mode"] != "0751" {
		t.Fatalf("mode %v, metadata %v", fi.Mode(), out.Metadata)
	}
	ents, _ := os.ReadDir(e.dir)
	for _, de := range ents {
		if strings.Contains(de.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", de.Name())
		}
	}

	// Writing through a symlink inside the workspace replaces its target
	// and keeps the link.
	e.write(t, "target.txt", "t")
	if err := os.Symlink("target.txt", filepath.Join(e.dir, "alias.txt")); err != nil {
		t.Fatal(err)
	}
	e.ok(t, "write", map[string]any{"path": "alias.txt", "content": "via link"})
	if got := readFile(t, filepath.Join(e.dir, "target.txt")); got != "via link" {
		t.Fatalf("target content %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(e.dir, "alias.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("alias.txt is no longer a symlink: %v %v", fi, err)
	}

	for _, tc := range []struct{ path, want string }{
		{"deep", "is a directory"},
		{"../escape.txt", "outside the workspace"},
		{"/etc/toolgate-test", "outside the workspace"},
		{".", "is a directory"},
	} {
		out := e.toolErr(t, "write", map[string]any{"path": tc.path, "content": "x"})
		if !strings.Contains(out.Content, tc.want) {
			t.Errorf("write %s: %q, want %q", tc.path, out.Content, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.dir), "escape.txt")); err == nil {
		t.Fatal("write escaped the workspace")
	}
}

// TestWriteIsAtomic checks that concurrent readers only ever see the old or
// the new content, never a mix or an empty file.
func TestWriteIsAtomic(t *testing.T) {
	e := newEnv(t, Config{})
	a, b := strings.Repeat("a", 1<<16), strings.Repeat("b", 1<<16)
	p := e.write(t, "f", a)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		bad := 0
		for ctx.Err() == nil {
			got, err := os.ReadFile(p)
			if err != nil || (string(got) != a && string(got) != b) {
				bad++
			}
		}
		done <- bad
	}()
	for i := range 200 {
		content := a
		if i%2 == 0 {
			content = b
		}
		e.ok(t, "write", map[string]any{"path": "f", "content": content})
	}
	cancel()
	if bad := testenv.Recv(t, done, "done"); bad != 0 {
		t.Fatalf("%d reads saw a partial or missing file", bad)
	}
}

func TestWriteDeniedPathWritesNothing(t *testing.T) {
	e := newEnv(t, Config{}, tools.WithGate(denyGate{deny: "secrets"}))
	_, err := e.call(t, "write", map[string]any{"path": "secrets/key.pem", "content": "x"})
	if !errors.Is(err, tools.ErrDenied) {
		t.Fatalf("err %v, want ErrDenied", err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "secrets/key.pem")); !os.IsNotExist(err) {
		t.Fatalf("denied file exists: %v", err)
	}
}

func TestEdit(t *testing.T) {
	e := newEnv(t, Config{})
	orig := "package main\n\nfunc a() {\n\treturn 1\n}\n\nfunc b() {\n\treturn 1\n}\n"
	p := e.write(t, "main.go", orig)
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}

	out := e.toolErr(t, "edit", map[string]any{"path": "main.go", "old_string": "return 1", "new_string": "return 2"})
	for _, w := range []string{"matches 2 times", "add surrounding context", "replace_all"} {
		if !strings.Contains(out.Content, w) {
			t.Errorf("ambiguous edit message %q lacks %q", out.Content, w)
		}
	}
	if out.Metadata["matches"] != 2 {
		t.Errorf("metadata %v", out.Metadata)
	}
	if readFile(t, p) != orig {
		t.Fatal("a refused edit changed the file")
	}

	out = e.ok(t, "edit", map[string]any{"path": "main.go", "old_string": "func b() {\n\treturn 1", "new_string": "func b() {\n\treturn 3"})
	if out.Metadata["replacements"] != 1 || !strings.Contains(out.Content, "Replaced 1 occurrence in main.go") {
		t.Fatalf("output %q %v", out.Content, out.Metadata)
	}
	if !strings.Contains(out.Content, "-\treturn 1\n+\treturn 3\n") || !strings.Contains(out.Content, "--- main.go\n+++ main.go\n@@ -5,5 +5,5 @@") {
		t.Fatalf("diff preview:\n%s", out.Content)
	}

	out = e.ok(t, "edit_file", map[string]any{"path": "main.go", "old_string": "func", "new_string": "fn", "replace_all": true})
	if out.Metadata["replacements"] != 2 {
		t.Fatalf("replace_all: %v", out.Metadata)
	}
	want := "package main\n\nfn a() {\n\treturn 1\n}\n\nfn b() {\n\treturn 3\n}\n"
	if got := readFile(t, p); got != want {
		t.Fatalf("content %q, want %q", got, want)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600 kept", fi.Mode())
	}

	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"path": "main.go", "old_string": "x", "new_string": "x"}, "are the same"},
		{map[string]any{"path": "main.go", "old_string": "", "new_string": "x"}, "old_string is empty"},
		{map[string]any{"path": "main.go", "old_string": "absent", "new_string": "x"}, "was not found"},
		{map[string]any{"path": "nope.go", "old_string": "a", "new_string": "b"}, "nope.go: no such file"},
	} {
		out := e.toolErr(t, "edit", tc.args)
		if !strings.Contains(out.Content, tc.want) {
			t.Errorf("edit %v: %q, want %q", tc.args, out.Content, tc.want)
		}
	}
}

// TestUnifiedDiffMatchesDiffU checks the preview against diff -u.
func TestUnifiedDiffMatchesDiffU(t *testing.T) {
	diffBin := testenv.LookPath(t, "diff", "diffutils")
	var a, b strings.Builder
	for i := range 60 {
		line := "line " + itoa(i) + "\n"
		a.WriteString(line)
		switch {
		case i == 3:
			b.WriteString("changed 3\n")
		case i == 20 || i == 21:
		case i == 40:
			b.WriteString(line + "inserted\n")
		case i == 45:
			b.WriteString("changed 45\n")
		default:
			b.WriteString(line)
		}
	}
	b.WriteString("tail without newline")
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(pa, []byte(a.String()), 0o644)
	os.WriteFile(pb, []byte(b.String()), 0o644)
	out, _ := exec.Command(diffBin, "-u", "--label", "f", "--label", "f", pa, pb).Output()
	if got := unifiedDiff("f", a.String(), b.String(), 3); got != string(out) {
		t.Fatalf("diff differs from diff -u:\n--- got\n%s\n--- diff -u\n%s", got, out)
	}
}

func touch(t testing.TB, p string, mtime time.Time) {
	t.Helper()
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestGlob(t *testing.T) {
	e := newEnv(t, Config{})
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	files := []string{"a.go", "src/b.go", "src/deep/c.go", "src/deep/d.txt", ".hidden/e.go", "vendor/f.go", "src/g_test.go"}
	for i, f := range files {
		touch(t, e.write(t, f, "x"), base.Add(time.Duration(i)*time.Hour))
	}
	e.write(t, ".gitignore", "vendor/\n")
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string
		meta map[string]any
	}{
		{"all go newest first", map[string]any{"pattern": "**/*.go"}, []string{"src/g_test.go", "src/deep/c.go", "src/b.go", "a.go"}, map[string]any{"truncated": false, "total": 4}},
		{"base path", map[string]any{"pattern": "**/*.go", "path": "src/deep"}, []string{"src/deep/c.go"}, nil},
		{"literal prefix", map[string]any{"pattern": "src/*.go"}, []string{"src/g_test.go", "src/b.go"}, nil},
		{"braces", map[string]any{"pattern": "**/*.{txt,go}", "path": "src/deep"}, []string{"src/deep/d.txt", "src/deep/c.go"}, nil},
		{"limit", map[string]any{"pattern": "**/*.go", "limit": 2}, []string{"src/g_test.go", "src/deep/c.go"}, map[string]any{"truncated": true, "total": 4, "count": 2}},
		{"hidden and ignored", map[string]any{"pattern": "**/*.go", "hidden": true, "no_ignore": true}, []string{"src/g_test.go", "vendor/f.go", ".hidden/e.go", "src/deep/c.go", "src/b.go", "a.go"}, nil},
		{"absolute", map[string]any{"pattern": filepath.Join(e.dir, "src", "*.go")}, []string{"src/g_test.go", "src/b.go"}, nil},
		{"no match", map[string]any{"pattern": "**/*.rs"}, nil, map[string]any{"total": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := e.ok(t, "glob", tc.args)
			var got []string
			for _, l := range strings.Split(out.Content, "\n") {
				if l != "" && !strings.HasPrefix(l, "(") && !strings.HasPrefix(l, "No files") {
					got = append(got, l)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v\n%s", got, tc.want, out.Content)
			}
			for k, v := range tc.meta {
				if out.Metadata[k] != v {
					t.Errorf("metadata %s = %v, want %v", k, out.Metadata[k], v)
				}
			}
		})
	}
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"pattern": "[abc"}, "not a valid pattern"},
		{map[string]any{"pattern": "*.go", "path": "../"}, "outside the workspace"},
		{map[string]any{"pattern": "/etc/*"}, "outside the workspace"},
		{map[string]any{"pattern": "*.go", "path": "missing"}, "no such file"},
	} {
		out := e.toolErr(t, "glob", tc.args)
		if !strings.Contains(out.Content, tc.want) {
			t.Errorf("glob %v: %q, want %q", tc.args, out.Content, tc.want)
		}
	}
}

func TestGrep(t *testing.T) {
	e := newEnv(t, Config{MaxLineLength: 40})
	e.write(t, "a.go", "package a\n\nfunc Alpha() {}\n\nfunc beta() {}\n")
	e.write(t, "b.txt", "alpha\nALPHA\nnothing\nalpha again\n")
	e.write(t, "c.go", "package c\n// one\n// two\nfunc Gamma() {}\n// three\n// four\n// five\n// six\nfunc Delta() {}\n")
	e.write(t, "bin.dat", "func Alpha\x00binary")
	e.write(t, "ignored/x.go", "func Alpha() {}\n")
	e.write(t, ".gitignore", "ignored/\n")
	e.write(t, "sub/.gitignore", "*.log\n!keep.log\n")
	e.write(t, "sub/drop.log", "func Alpha\n")
	e.write(t, "sub/keep.log", "func Alpha\n")
	e.write(t, ".dot/h.go", "func Alpha() {}\n")
	e.write(t, "long.txt", "func "+strings.Repeat("z", 100)+"\n")
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
		meta map[string]any
	}{
		{"files default mode", map[string]any{"pattern": `func [A-Z]`},
			"a.go\nc.go\nsub/keep.log\n", map[string]any{"matched_files": 3, "skipped_binary": 1}},
		{"content", map[string]any{"pattern": "^func", "output_mode": "content", "path": "a.go"},
			"a.go:3:func Alpha() {}\na.go:5:func beta() {}\n", nil},
		{"count", map[string]any{"pattern": "alpha", "output_mode": "count", "-i": true, "glob": "*.txt"},
			"b.txt:3\n", map[string]any{"matched_lines": 3}},
		{"fixed string", map[string]any{"pattern": "Alpha()", "fixed_string": true, "output_mode": "content", "type": "go"},
			"a.go:3:func Alpha() {}\n", nil},
		{"context", map[string]any{"pattern": "^func", "output_mode": "content", "path": "c.go", "-C": 1},
			"c.go-3-// two\nc.go:4:func Gamma() {}\nc.go-5-// three\n--\nc.go-8-// six\nc.go:9:func Delta() {}\n", nil},
		{"context after before", map[string]any{"pattern": "Gamma", "output_mode": "content", "path": "c.go", "context_before": 2, "-A": 0},
			"c.go-2-// one\nc.go-3-// two\nc.go:4:func Gamma() {}\n", nil},
		{"no line numbers", map[string]any{"pattern": "beta", "output_mode": "content", "-n": false},
			"a.go:func beta() {}\n", nil},
		{"negated glob", map[string]any{"pattern": "func", "glob": "!*.go"},
			"long.txt\nsub/keep.log\n", nil},
		{"hidden", map[string]any{"pattern": "Alpha", "hidden": true, "type": "go"},
			".dot/h.go\na.go\n", nil},
		{"no ignore", map[string]any{"pattern": "Alpha", "no_ignore": true, "glob": "**/*.{go,log}"},
			"a.go\nignored/x.go\nsub/drop.log\nsub/keep.log\n", nil},
		{"head limit and offset", map[string]any{"pattern": "a|A", "output_mode": "content", "path": "b.txt", "offset": 1, "head_limit": 1},
			"b.txt:2:ALPHA\n(head_limit reached: entries 2-2 of 3 shown; continue with offset=2)\n", map[string]any{"truncated": true}},
		{"long line clipped", map[string]any{"pattern": "zzz", "output_mode": "content", "path": "long.txt"},
			"long.txt:1:func " + strings.Repeat("z", 35) + "... [65 characters clipped]\n", nil},
		{"no match is not an error", map[string]any{"pattern": "nowhere to be found"},
			"No matches.\n", map[string]any{"matched_files": 0}},
		{"match across lines does not count", map[string]any{"pattern": `alpha\sALPHA`, "path": "b.txt"},
			"No matches.\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := e.ok(t, "grep", tc.args)
			if out.Content != tc.want {
				t.Fatalf("content:\n%s\nwant:\n%s", out.Content, tc.want)
			}
			for k, v := range tc.meta {
				if out.Metadata[k] != v {
					t.Errorf("metadata %s = %v, want %v (%v)", k, out.Metadata[k], v, out.Metadata)
				}
			}
		})
	}
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"pattern": "a(b"}, "invalid regular expression"},
		{map[string]any{"pattern": "a", "path": "missing"}, "no such file"},
		{map[string]any{"pattern": "a", "path": "/etc"}, "outside the workspace"},
		{map[string]any{"pattern": "a", "glob": "[x"}, "not a valid pattern"},
	} {
		out := e.toolErr(t, "grep", tc.args)
		if !strings.Contains(out.Content, tc.want) {
			t.Errorf("grep %v: %q, want %q", tc.args, out.Content, tc.want)
		}
	}
	if _, err := e.call(t, "grep", map[string]any{"pattern": "a", "type": "cobol"}); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("unknown type: %v, want invalid arguments", err)
	}
}

func TestGrepSkipsDeniedFiles(t *testing.T) {
	e := newEnv(t, Config{}, tools.WithGate(denyGate{deny: "secret"}))
	e.write(t, "open.txt", "token\n")
	e.write(t, "secret.txt", "token\n")
	if err := os.Symlink("secret.txt", filepath.Join(e.dir, "innocent.txt")); err != nil {
		t.Fatal(err)
	}
	out := e.ok(t, "grep", map[string]any{"pattern": "token"})
	if out.Content != "open.txt\n" || out.Metadata["skipped_denied"] != 1 {
		t.Fatalf("content %q metadata %v", out.Content, out.Metadata)
	}
	out = e.ok(t, "glob", map[string]any{"pattern": "*.txt"})
	if out.Content != "open.txt\n" || out.Metadata["denied"] != 1 {
		t.Fatalf("glob: %q %v", out.Content, out.Metadata)
	}
	// Named explicitly, a denied file is a policy refusal.
	if _, err := e.call(t, "grep", map[string]any{"pattern": "token", "path": "secret.txt"}); !errors.Is(err, tools.ErrDenied) {
		t.Fatalf("grep on a denied file: %v", err)
	}
}

// TestWalksHonourCancellation: a cancelled context stops grep and glob with
// the context's error.
func TestWalksHonourCancellation(t *testing.T) {
	e := newEnv(t, Config{})
	for i := range 50 {
		e.write(t, filepath.Join("d"+itoa(i), "f.txt"), "x\n")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range []string{"grep", "glob"} {
		raw := []byte(`{"pattern":"**"}`)
		if name == "grep" {
			raw = []byte(`{"pattern":"x"}`)
		}
		out, err := e.p.Handle(ctx, &tools.Call{ID: "c", Name: name, Arguments: raw})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: out %v err %v, want context.Canceled", name, out, err)
		}
	}
}

func TestSkill(t *testing.T) {
	dir := t.TempDir()
	skills := filepath.Join(dir, ".skills")
	os.MkdirAll(filepath.Join(skills, "pdf"), 0o755)
	os.MkdirAll(filepath.Join(skills, "review"), 0o755)
	os.WriteFile(filepath.Join(skills, "pdf", "SKILL.md"), []byte("---\nname: pdf-forms\ndescription: Fill PDF forms\n---\n# PDF\nUse pdftk.\n"), 0o644)
	os.WriteFile(filepath.Join(skills, "review", "SKILL.md"), []byte("# Review\nRead the diff first.\n"), 0o644)
	e := newEnv(t, Config{Workspace: dir})
	tool, _ := e.reg.Get("skill")
	if !strings.Contains(tool.Description, "pdf-forms: Fill PDF forms") || !strings.Contains(tool.Description, "- review") {
		t.Fatalf("description does not name the skills: %s", tool.Description)
	}
	out := e.ok(t, "skill", map[string]any{"skill": "pdf-forms"})
	if !strings.Contains(out.Content, "Use pdftk.") || out.Metadata["skill"] != "pdf-forms" {
		t.Fatalf("skill text: %q %v", out.Content, out.Metadata)
	}
	out = e.ok(t, "skill", map[string]any{})
	if out.Content != "pdf-forms: Fill PDF forms\nreview\n" {
		t.Fatalf("listing %q", out.Content)
	}
	out = e.toolErr(t, "skill", map[string]any{"skill": "nope"})
	if !strings.Contains(out.Content, "available skills: pdf-forms, review") {
		t.Fatalf("unknown skill: %q", out.Content)
	}
	// A skill added after start-up can still be loaded.
	os.MkdirAll(filepath.Join(skills, "late"), 0o755)
	os.WriteFile(filepath.Join(skills, "late", "SKILL.md"), []byte("late skill\n"), 0o644)
	if out := e.ok(t, "skill", map[string]any{"skill": "late"}); out.Content != "late skill\n" {
		t.Fatalf("late skill: %q", out.Content)
	}

	// Without a skills directory the tool says so.
	e2 := newEnv(t, Config{})
	tool, _ = e2.reg.Get("skill")
	if !strings.Contains(tool.Description, "No skills were available") {
		t.Fatalf("description %q", tool.Description)
	}
	if out := e2.toolErr(t, "skill", map[string]any{"skill": "x"}); !strings.Contains(out.Content, "no skills directory") {
		t.Fatalf("%q", out.Content)
	}
}
