package bash

import "github.com/toolgate/toolgate/pkg/sandboxinit"

// initSpec is what the sandbox's first program does for the worker's
// identity: drop root to the workspace's owner, or keep root without
// capabilities, or (an unprivileged worker) nothing but the restriction.
func (b *bash) initSpec(restrict bool, allow []string) sandboxinit.Spec {
	return sandboxinit.Spec{Drop: b.id.drop, UID: b.id.uid, GID: b.id.gid, Root: b.id.root, Restrict: restrict, Allow: allow}
}

// initMounts show exe at sandboxinit.Path, in a directory the user
// commands run as can enter.
func initMounts(exe string) []string {
	return []string{"--perms", "0755", "--dir", sandboxinit.Dir, "--ro-bind", exe, sandboxinit.Path}
}
