package bash

import "github.com/toolgate/toolgate/internal/sandboxinit"

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

// noexecDirs are the places a restricted call can write, which its first
// program remounts noexec (with every mount under them): the workspace
// ws, /tmp (its home among it) and /dev/shm. No file the call writes is
// then mapped executable, by execve or by the dynamic loader.
func noexecDirs(ws string) []string {
	dirs := []string{"/tmp", "/dev/shm"}
	if ws != "" {
		if _, in := within("/tmp", ws); !in {
			if _, in := within("/dev/shm", ws); !in {
				dirs = append(dirs, ws)
			}
		}
	}
	return dirs
}

// keepExec are the mounts under noexecDirs that stay executable: the
// programs the worker binds there read-only (this first program, the
// egress relay, the real git behind its wrapper), which a call cannot
// change.
var keepExec = []string{sandboxinit.Path, egressDir + "/relay", gitRealPath}

// execRule is what a call may execute: whether it is restricted at all,
// the regular files it may execute (allow) and the directories beneath
// which it may execute everything (dirs); why says so for the audit.
type execRule struct {
	restrict bool
	allow    []string
	dirs     []string
	git      bool // the call runs git: its wrapper and sanitised configs
	why      string
}
