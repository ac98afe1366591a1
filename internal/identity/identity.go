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

	"github.com/toolgate/toolgate/pkg/trust"
)

// Role is what an identity may do on the bus (pkg/trust, where readers
// of signatures check it).
type Role = trust.Role

// Roles.
const (
	RoleWorker   = trust.RoleWorker
	RoleApprover = trust.RoleApprover
	RoleAdmin    = trust.RoleAdmin
	RoleAgent    = trust.RoleAgent
	RoleTool     = trust.RoleTool
	RoleHook     = trust.RoleHook
)

// RoleTagPrefix starts the user JWT tag that carries the role.
const RoleTagPrefix = trust.RoleTagPrefix

// ServicesTagPrefix starts the tag of an agent's user JWT that names the
// toolgate account (Creds.Services).
const ServicesTagPrefix = trust.ServicesTagPrefix

// Roles lists every role.
var Roles = trust.Roles

// Errors callers branch on.
var (
	// ErrBadRole reports a role that is not one of Roles.
	ErrBadRole = trust.ErrBadRole
	// ErrBadName reports an identity name that cannot stand as a subject token.
	ErrBadName = trust.ErrBadName
	// ErrBadCreds reports a credentials file that is not a toolgate user's.
	ErrBadCreds = trust.ErrBadCreds
	// ErrWrongIdentity reports credentials of another role or agent than
	// the one needed.
	ErrWrongIdentity = errors.New("wrong credentials")
	// ErrInWorkspace reports state placed where a served workspace reaches it.
	ErrInWorkspace = errors.New("inside a served workspace")
)

// ParseRole returns the role named s (case-insensitive).
func ParseRole(s string) (Role, error) { return trust.ParseRole(s) }

// ValidName checks that name can name an identity (trust.ValidName).
func ValidName(name string) error { return trust.ValidName(name) }

// EnvStateDir, when set, names the state directory instead of the XDG one.
const EnvStateDir = trust.EnvStateDir

// EnvCreds names a credentials file every client uses when no --creds is given.
const EnvCreds = trust.EnvCreds

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

// StatePath is StateDir's path, without creating it (trust.StatePath).
func StatePath() (string, error) { return trust.StatePath() }

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
