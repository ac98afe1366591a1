package bash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools"
)

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", ModeAuto, false},
		{"auto", ModeAuto, false},
		{" Require ", ModeRequire, false},
		{"OFF", ModeOff, false},
		{"on", "", true},
		{"bwrap", "", true},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalidMode) || !strings.Contains(err.Error(), tt.in) || !strings.Contains(err.Error(), "auto, require or off") {
				t.Errorf("ParseMode(%q) error = %v; want ErrInvalidMode naming the value and the choices", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	var m Mode
	if err := m.UnmarshalText([]byte("require")); err != nil || m != ModeRequire {
		t.Errorf("UnmarshalText(require) = %q, %v", m, err)
	}
	if err := m.Set("sometimes"); !errors.Is(err, ErrInvalidMode) || m != ModeRequire {
		t.Errorf("Set(sometimes) = %v and changed the mode to %q", err, m)
	}
	if Mode("").String() != "auto" {
		t.Errorf("zero Mode is %q, want auto", Mode("").String())
	}
}

func TestCheckEnvName(t *testing.T) {
	for _, ok := range []string{"GOPATH", "TZ", "LANG", "PATH", "NODE_OPTIONS", "lower_case"} {
		if err := checkEnvName(ok); err != nil {
			t.Errorf("checkEnvName(%s) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "1X", "A-B", "A=B", "LD_PRELOAD", "ld_library_path", "GIT_DIR", "BASH_ENV", "ENV", "SHELLOPTS", "HOME", "DYLD_INSERT_LIBRARIES", "BASH_FUNC_x%%",
		"API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "PGPASSWORD", "SSH_AUTH_SOCK", "GOOGLE_APPLICATION_CREDENTIALS", "PRIVATE_PEM"} {
		if err := checkEnvName(bad); err == nil {
			t.Errorf("checkEnvName(%q) = nil, want an error", bad)
		}
	}
}

func TestEnviron(t *testing.T) {
	worker := map[string]string{
		"PATH":         "/usr/bin:.:bin::/usr/local/bin:/usr/bin",
		"LANG":         "de_DE.UTF-8",
		"SECRET_TOKEN": "s3cr3t",
		"LD_PRELOAD":   "/evil.so",
		"HOME":         "/root",
	}
	got := withoutGit(environ("/ws", map[string]string{"TZ": "UTC"}, func(k string) string { return worker[k] }))
	want := []string{"LANG=de_DE.UTF-8", "PATH=/usr/bin:/usr/local/bin", "TERM=dumb", "TZ=UTC"}
	if !slices.Equal(got, want) {
		t.Errorf("environ = %q, want %q", got, want)
	}
	got = withoutGit(environ("/ws", nil, func(string) string { return "" }))
	want = []string{"LANG=" + defaultLang, "PATH=" + defaultPath, "TERM=dumb"}
	if !slices.Equal(got, want) {
		t.Errorf("environ with an empty worker env = %q, want %q", got, want)
	}
	got = callEnv([]string{"PATH=/bin"}, "/h", "/t")
	want = []string{"HOME=/h", "PATH=/bin", "TMPDIR=/t", "XDG_CACHE_HOME=/h/.cache", "XDG_CONFIG_HOME=/h/.config",
		"XDG_DATA_HOME=/h/.local/share", "XDG_STATE_HOME=/h/.local/state"}
	if !slices.Equal(got, want) {
		t.Errorf("callEnv = %q, want %q", got, want)
	}
}

// withoutGit drops git's safety settings (tested on their own) from env.
func withoutGit(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "PAGER=") })
}

func TestGitSafetyOutranksEveryConfigFile(t *testing.T) {
	env := gitEnv("/ws")
	if env["GIT_CONFIG_GLOBAL"] != "/dev/null" || env["GIT_CONFIG_NOSYSTEM"] != "1" {
		t.Fatalf("git env = %v", env)
	}
	n := len(gitSafety) + 1
	if env["GIT_CONFIG_COUNT"] != strconv.Itoa(n) || env["GIT_CONFIG_KEY_0"] != "core.fsmonitor" || env[fmt.Sprintf("GIT_CONFIG_KEY_%d", n-1)] == "" {
		t.Fatalf("git env = %v", env)
	}
}

func TestSandboxArgv(t *testing.T) {
	s := Sandbox{Kind: KindBwrap, Bwrap: "/usr/bin/bwrap", Setpriv: "/usr/bin/setpriv"}
	inner := []string{"/bin/bash", "-c", "true"}
	tests := []struct {
		name     string
		ws       string
		network  bool
		id       identity
		want     [][]string // each must appear as consecutive arguments
		wantNot  []string
		wantTail []string
	}{
		{
			name: "root worker, no network",
			ws:   "/tmp/a/b/ws", id: identity{drop: true, uid: 1000, gid: 1001},
			want: [][]string{{"--perms", "1777", "--tmpfs", "/tmp"}, {"--perms", "0755", "--dir", "/tmp/a"},
				{"--perms", "0755", "--dir", "/tmp/a/b"}, {"--bind", "/tmp/a/b/ws", "/tmp/a/b/ws"}, {"--unshare-net"}, {"--unshare-pid"},
				{"--die-with-parent"}, {"--new-session"}, {"--cap-drop", "ALL"}, {"--chdir", "/tmp/a/b/ws/sub"},
				{"/usr/bin/setpriv", "--reuid=1000", "--regid=1001", "--clear-groups", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--"}},
			wantNot:  []string{"/"},
			wantTail: inner,
		},
		{
			name:    "unprivileged worker, network granted",
			ws:      "/srv/ws",
			want:    [][]string{{"--bind", "/srv/ws", "/srv/ws"}, {"--cap-drop", "ALL"}},
			network: true, wantNot: []string{"--unshare-net", "--cap-add", "/usr/bin/setpriv", "--dir"},
			wantTail: inner,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := s.argv(tt.ws, tt.ws+"/sub", tt.network, tt.id, nil, inner)
			joined := "\x00" + strings.Join(a, "\x00") + "\x00"
			for _, w := range tt.want {
				if !strings.Contains(joined, "\x00"+strings.Join(w, "\x00")+"\x00") {
					t.Errorf("argv lacks %q: %q", w, a)
				}
			}
			for _, w := range tt.wantNot {
				if slices.Contains(a, w) {
					t.Errorf("argv has %q: %q", w, a)
				}
			}
			if !slices.Equal(a[len(a)-len(tt.wantTail):], tt.wantTail) {
				t.Errorf("argv does not end with the command: %q", a)
			}
			// The workspace is bound after the tmpfs over /tmp, or the
			// tmpfs would hide it.
			if i, j := slices.Index(a, "/tmp"), slices.Index(a, "--bind"); tt.ws[:5] == "/tmp/" && i > j {
				t.Errorf("--bind before the /tmp tmpfs: %q", a)
			}
		})
	}
}

func TestWithin(t *testing.T) {
	tests := []struct {
		root, p string
		ok      bool
	}{
		{"/ws", "/ws", true},
		{"/ws", "/ws/a/b", true},
		{"/ws", "/ws/..a", true},
		{"/ws", "/wsx", false},
		{"/ws", "/", false},
		{"/ws", "/ws/../etc", false},
	}
	for _, tt := range tests {
		if _, ok := within(tt.root, tt.p); ok != tt.ok {
			t.Errorf("within(%q, %q) = %v, want %v", tt.root, tt.p, ok, tt.ok)
		}
	}
}

func TestLimitsPrologue(t *testing.T) {
	l := Limits{CPUSeconds: 10, FileSize: 1 << 20, AddressSpace: 1 << 30, OpenFiles: 64, Processes: 100}
	want := "ulimit -c 0 && ulimit -t 10 && ulimit -f 1024 && ulimit -v 1048576 && ulimit -n 64 && ulimit -u 100"
	if got := l.prologue(); got != want {
		t.Errorf("prologue = %q, want %q", got, want)
	}
	if got := (Limits{CPUSeconds: -1, FileSize: -1, AddressSpace: -1, OpenFiles: -1}).prologue(); got != "ulimit -c 0" {
		t.Errorf("prologue with every limit off = %q", got)
	}
	r := resolveLimits(Limits{OpenFiles: -1})
	if r.CPUSeconds != DefaultCPUSeconds || r.FileSize != DefaultFileSize || r.OpenFiles != -1 || r.Processes != 0 {
		t.Errorf("resolveLimits = %+v", r)
	}
}

func TestKillGroupRefusesOwnGroupAndInit(t *testing.T) {
	for _, pgid := range []int{-1, 0, 1} {
		if err := killGroup(pgid); err == nil {
			t.Errorf("killGroup(%d) = nil; it must refuse", pgid)
		}
	}
}

func TestSanitizeGitConfigKeepsOnlySettingsThatRunNothing(t *testing.T) {
	gitPath := testenv.LookPath(t, "git", "git")
	src := filepath.Join(t.TempDir(), "config")
	cfg := `[core]
	repositoryformatversion = 0
	bare = false
	fsmonitor = evil
	pager = evil
	hooksPath = evil
[user]
	name = "A \"quoted\" name\\"
[remote "Up Stream"]
	url = https://example.com/r.git
	fetch = +refs/heads/*:refs/remotes/origin/*
	uploadpack = evil
	receivepack = evil
[diff "x"]
	funcname = "^func"
	textconv = evil
	command = evil
[diff]
	external = evil
	renames = true
[merge "x"]
	driver = evil
	name = fine
[filter "x"]
	clean = evil
[alias]
	st = !evil
[include]
	path = evil
[includeIf "gitdir:/"]
	path = evil
[credential]
	helper = evil
[submodule "s"]
	url = https://example.com/s.git
	update = !evil
[branch "main"]
	remote = origin
`
	if err := os.WriteFile(src, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	got := sanitizeGitConfig(context.Background(), gitPath, src)
	if bytes.Contains(got, []byte("evil")) {
		t.Errorf("sanitised config still names a program:\n%s", got)
	}
	dst := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(dst, got, 0o644); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"user.name":                    `A "quoted" name\`,
		"remote.Up Stream.url":         "https://example.com/r.git",
		"diff.x.funcname":              "^func",
		"diff.renames":                 "true",
		"merge.x.name":                 "fine",
		"branch.main.remote":           "origin",
		"core.repositoryformatversion": "0",
		"submodule.s.url":              "https://example.com/s.git",
	} {
		out, err := exec.Command(gitPath, "config", "--file", dst, "--get", key).Output()
		if err != nil || strings.TrimSuffix(string(out), "\n") != want {
			t.Errorf("%s = %q (%v), want %q\n%s", key, out, err, want, got)
		}
	}
}

func TestGitMountsCoverNestedSubmodulesAndStayInTheWorkspace(t *testing.T) {
	testenv.LookPath(t, "git", "git")
	ws := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside.cfg")
	for _, f := range []string{".git/HEAD", ".git/config", ".git/modules/a/HEAD", ".git/modules/a/config",
		".git/modules/a/modules/b/HEAD", ".git/modules/a/modules/b/config", ".git/modules/x/y/HEAD", ".git/modules/x/y/config"} {
		if err := os.MkdirAll(filepath.Join(ws, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, f), []byte("[core]\n\tfsmonitor = evil\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A config that is a link out of the workspace is left alone: the
	// sandbox shows it read-only, and it is not the agent's.
	if err := os.Symlink(outside, filepath.Join(ws, ".git", "config.worktree")); err != nil {
		t.Fatal(err)
	}
	var files sandboxFiles
	defer files.close()
	args, err := gitMounts(context.Background(), ws, newGitConfigCache(), files.data)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, "\n")
	for _, want := range []string{".git/config", ".git/modules/a/config", ".git/modules/a/modules/b/config", ".git/modules/x/y/config", ".git/hooks"} {
		if !strings.Contains(joined, filepath.Join(ws, want)+"\n") && !strings.HasSuffix(joined, filepath.Join(ws, want)) {
			t.Errorf("%s is not covered: %q", want, args)
		}
	}
	if strings.Contains(joined, outside) {
		t.Errorf("a file outside the workspace is covered: %q", args)
	}
}

func TestSanitizeGitConfigRefusesAnOversizedFile(t *testing.T) {
	gitPath := testenv.LookPath(t, "git", "git")
	src := filepath.Join(t.TempDir(), "config")
	big := "[core]\n\tfsmonitor = evil\n[user]\n\tname = " + strings.Repeat("x", maxGitConfig) + "\n"
	if err := os.WriteFile(src, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := sanitizeGitConfig(context.Background(), gitPath, src); len(got) != 0 {
		t.Errorf("an oversized config was parsed: %d bytes", len(got))
	}
}

// TestGitConfigCacheFollowsTheFile: a sanitised config is served from the
// cache while its file is unchanged (git is not run: a missing git would
// give nothing), and sanitised again, a planted program dropped, once the
// file changes.
func TestGitConfigCacheFollowsTheFile(t *testing.T) {
	gitPath := testenv.LookPath(t, "git", "git")
	defer func(d time.Duration) { gitRecent = d }(gitRecent)
	gitRecent = 0
	src := filepath.Join(t.TempDir(), "config")
	c := newGitConfigCache()
	get := func(git string) string {
		fi, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		return string(c.sanitized(context.Background(), git, src, fi))
	}
	if err := os.WriteFile(src, []byte("[user]\n\tname = a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := get(gitPath); !strings.Contains(got, `name = "a"`) {
		t.Fatalf("first read: %q", got)
	}
	if got := get("/nonexistent/git"); !strings.Contains(got, `name = "a"`) {
		t.Fatalf("an unchanged file was not served from the cache: %q", got)
	}
	if err := os.WriteFile(src, []byte("[user]\n\tname = b\n[diff \"x\"]\n\tcommand = touch /tmp/pwned\n[core]\n\tfsmonitor = evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := get(gitPath)
	if !strings.Contains(got, `name = "b"`) || strings.Contains(got, "pwned") || strings.Contains(got, "evil") {
		t.Fatalf("after the change: %q", got)
	}
}

// TestHeldSandboxThatFailsToBuildSaysSo: when bwrap cannot build the
// sandbox (here a system directory to show that does not exist), the held start lets bwrap's own exit code and message
// through, as SandboxFailed reads them, and runs nothing of the command.
func TestHeldSandboxThatFailsToBuildSaysSo(t *testing.T) {
	testenv.LookPath(t, "bwrap", "bubblewrap")
	ws := ownedWorkspace(t)
	b, err := newBash(Config{Workspace: ws, Sandbox: ModeRequire})
	if err != nil {
		t.Fatal(err)
	}
	b.sb.view = append(slices.Clone(b.sb.view), "--ro-bind", "/nonexistent-toolgate-test/hidden", "/hidden")
	res, err := b.run(context.Background(), &tools.Call{ID: "fails"}, "touch ran", ws, false)
	if err != nil {
		t.Fatal(err)
	}
	stderr, _ := res.err.render(1 << 10)
	md := b.output(res, false, nil).Metadata
	if !SandboxFailed(md) {
		t.Fatalf("exit code %d, stderr %q: not read as a sandbox failure", res.code, stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the command ran")
	}
}

// TestPathViewFollowsTheUser: a directory of PATH outside the system's is
// shown to commands only when their user could reach it on the host (a
// root worker's PATH naming /root/.cargo/bin shows it to root's commands,
// not to those dropped to the workspace's owner).
func TestPathViewFollowsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory only root may enter")
	}
	top, err := os.MkdirTemp("/var/tmp", "toolgate-pathview-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	private := filepath.Join(top, "private", "tool")
	open := filepath.Join(top, "open", "tool")
	for _, d := range []string{filepath.Join(private, "bin"), filepath.Join(open, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(top, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(private, "bin") + ":" + filepath.Join(open, "bin")
	for _, tt := range []struct {
		id   identity
		want []string
	}{
		{identity{drop: true, uid: 4242, gid: 4242}, []string{filepath.Join(open, "bin")}},
		{identity{root: true}, []string{filepath.Join(private, "bin"), filepath.Join(open, "bin")}},
	} {
		got := binds(pathView(path, tt.id))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%+v: shown %q, want %q", tt.id, got, tt.want)
		}
	}
}

// TestSandboxOwnDev: a worker that is not root builds /dev itself (the
// devices bound one by one), so that bwrap does not nest a second user
// namespace whose capabilities could not remount the writable places
// noexec.
func TestSandboxOwnDev(t *testing.T) {
	inner := []string{"/bin/bash", "-c", "true"}
	for _, own := range []bool{false, true} {
		s := Sandbox{Kind: KindBwrap, Bwrap: "/usr/bin/bwrap", ownDev: own}
		a := strings.Join(s.argv("/srv/ws", "/srv/ws", false, identity{}, nil, inner), "\x00")
		hasDev := strings.Contains(a, "\x00--dev\x00/dev\x00")
		hasNull := strings.Contains(a, "\x00--dev-bind\x00/dev/null\x00/dev/null\x00")
		if hasDev == own || hasNull != own {
			t.Errorf("ownDev %v: --dev %v, /dev/null bound %v: %q", own, hasDev, hasNull, strings.Split(a, "\x00"))
		}
	}
}
