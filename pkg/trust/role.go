package trust

import (
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/pkg/events"
)

// Role is what an identity may do on the bus; its user JWT names it in
// the tag "toolgate-role:<role>".
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

// Errors of names and roles, for errors.Is.
var (
	// ErrBadRole reports a role that is not one of Roles.
	ErrBadRole = errors.New("unknown role")
	// ErrBadName reports an identity name that cannot stand as a subject token.
	ErrBadName = errors.New("invalid identity name")
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

// RoleTag is the JWT tag of role r.
func RoleTag(r Role) string { return r.Tag() }

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

// InboxPrefix is the inbox prefix (nats.go CustomInboxPrefix) an identity
// must use: _INBOX_<name> for an agent, _INBOX.<role>.<name> for the
// others. Nobody may subscribe to _INBOX.>, so nobody reads another's
// replies.
//
// With an empty name, InboxPrefix(role, "") + ">" matches the inboxes of
// every identity of role (not for agents).
func InboxPrefix(role Role, name string) string {
	if role == RoleAgent {
		return "_INBOX_" + name
	}
	if name == "" {
		return "_INBOX." + string(role) + "."
	}
	return "_INBOX." + string(role) + "." + name
}
