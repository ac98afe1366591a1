// Package identity is who is who on the bus: the install's keys (an NATS
// operator, its system account and the toolgate account, created at first
// start), the user credentials each role gets (worker, approver, admin, one
// per agent) with the permissions of its role written in its user JWT, and
// the per-user state directory all of it lives in, outside any workspace.
//
// User JWTs are issued by the toolgate account key itself (no signing
// keys). Each has Name = the identity's name (for an agent the <agent>
// token of its subjects) and the tag "toolgate-role:<role>".
package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/pkg/events"
)

// Role is what an identity may do on the bus.
type Role string

// Roles.
const (
	// RoleWorker runs tools: consumes calls, publishes results, provisions.
	RoleWorker Role = "worker"
	// RoleApprover is the approver service: reads parked calls, publishes
	// decisions.
	RoleApprover Role = "approver"
	// RoleAdmin is a person at toolctl: pushes policy, manages amendments,
	// follows events, decides parked calls.
	RoleAdmin Role = "admin"
	// RoleAgent calls tools under its own name only.
	RoleAgent Role = "agent"
	// RoleTool serves the remote tool of its name (see pkg/remote):
	// answers discovery and the calls workers route to it, nothing else.
	RoleTool Role = "tool"
	// RoleHook serves the tool hook of its name (see pkg/hooks): answers
	// the requests workers send to toolgate.hook.<name>, nothing else.
	RoleHook Role = "hook"
)

// RoleTagPrefix starts the user JWT tag that carries the role.
const RoleTagPrefix = "toolgate-role:"

// ServicesTagPrefix starts the tag of an agent's user JWT that names the
// toolgate account (Creds.Services): agents are issued by the agents
// account, and their readers must know whose workers sign results.
const ServicesTagPrefix = "toolgate-services:"

// Roles lists every role.
var Roles = []Role{RoleWorker, RoleApprover, RoleAdmin, RoleAgent, RoleTool, RoleHook}

// Errors callers branch on.
var (
	// ErrBadRole reports a role that is not one of Roles.
	ErrBadRole = errors.New("unknown role")
	// ErrBadName reports an identity name that cannot stand as a subject token.
	ErrBadName = errors.New("invalid identity name")
	// ErrBadCreds reports a credentials file that is not a toolgate user's.
	ErrBadCreds = errors.New("invalid credentials")
	// ErrWrongIdentity reports credentials of another role or agent than
	// the one needed.
	ErrWrongIdentity = errors.New("wrong credentials")
	// ErrInWorkspace reports state placed where a served workspace reaches it.
	ErrInWorkspace = errors.New("inside a served workspace")
)

// ParseRole returns the role named s (case-insensitive).
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	for _, x := range Roles {
		if r == x {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w %q (want worker, approver, admin, agent or tool)", ErrBadRole, s)
}

// Tag is the user JWT tag naming r.
func (r Role) Tag() string { return RoleTagPrefix + string(r) }

// ValidName checks that name can name an identity: one subject token of
// letters, digits, '-' and '_' (it becomes part of subjects and of the
// agent's inbox prefix).
func ValidName(name string) error {
	if err := events.ValidToken(name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadName, err)
	}
	for _, r := range name {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("%w: %q contains %q (use letters, digits, '-' and '_')", ErrBadName, name, r)
		}
	}
	return nil
}

// EnvStateDir, when set, names the state directory instead of the XDG one.
const EnvStateDir = "TOOLGATE_STATE_DIR"

// EnvCreds names a credentials file every client uses when no --creds is given.
const EnvCreds = "TOOLGATE_CREDS"

// StateDir returns the calling OS user's state directory, creating it
// (mode 0700) when missing: $TOOLGATE_STATE_DIR, else
// $XDG_STATE_HOME/toolgate, else ~/.local/state/toolgate. It holds the
// install's keys, credentials, the approver's state and, by default, the
// embedded server's store.
func StateDir() (string, error) {
	dir, err := StatePath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return dir, nil
}

// StatePath is StateDir's path, without creating it.
func StatePath() (string, error) {
	dir := os.Getenv(EnvStateDir)
	if dir == "" {
		if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
			dir = filepath.Join(x, "toolgate")
		} else {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("state directory: %w (set XDG_STATE_HOME)", err)
			}
			dir = filepath.Join(home, ".local", "state", "toolgate")
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return dir, nil
}

// Within reports whether path is dir or lies below it, after resolving
// symbolic links of both where they exist.
func Within(path, dir string) bool {
	p, d := realPath(path), realPath(dir)
	if p == d {
		return true
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// realPath resolves symbolic links of the longest existing prefix of p.
func realPath(p string) string {
	p, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// CheckOutside returns an error wrapping ErrInWorkspace when path (what
// names it, e.g. "--data") lies inside any of the served roots, or is
// reached through a symbolic link that lies inside one: whoever can
// replace such a link decides what path names.
func CheckOutside(what, path string, roots ...string) error {
	hops := pathHops(path)
	for _, r := range roots {
		if r == "" {
			continue
		}
		rr := realPath(r)
		for _, h := range hops {
			if within(h, rr) {
				how := ""
				if h != hops[len(hops)-1] {
					how = " through the symbolic link " + h + ","
				}
				return fmt.Errorf("%s %s is%s %w %s: an agent could read or change it; keep it elsewhere (the state directory is $XDG_STATE_HOME/toolgate, or set %s)",
					what, path, how, ErrInWorkspace, r, EnvStateDir)
			}
		}
	}
	return nil
}

// within reports whether the absolute, resolved path p is dir or below it.
func within(p, dir string) bool {
	if p == dir {
		return true
	}
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// pathHops resolves p one component at a time, as the kernel does, and
// returns the location of every symbolic link it passes (its directory
// resolved) followed by the path p finally names. Components that do
// not exist yet are taken as written.
func pathHops(p string) []string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return []string{p}
	}
	var hops []string
	todo := strings.Split(abs, string(filepath.Separator))
	cur := string(filepath.Separator)
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 || links >= 40 {
			cur = next
			continue
		}
		links++
		hops = append(hops, next)
		target, err := os.Readlink(next)
		if err != nil {
			cur = next
			continue
		}
		if filepath.IsAbs(target) {
			cur = string(filepath.Separator)
		}
		todo = append(strings.Split(target, string(filepath.Separator)), todo...)
	}
	return append(hops, cur)
}
