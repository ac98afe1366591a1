package shell

import (
	"strings"
)

// Class is the built-in classification of a command (seed 002's bash
// classification): read-only commands run, dangerous ones need a person,
// forbidden ones never run.
type Class int

// Classes, by strictness.
const (
	// Unclassified commands are unknown to the classification.
	Unclassified Class = iota
	// ReadOnly commands only read (within the options judged separately).
	ReadOnly
	// Dangerous commands write, delete, reach the network or change git
	// history.
	Dangerous
	// Forbidden commands change the machine itself.
	Forbidden
)

// String returns the Class as written in documents and logs.
func (c Class) String() string {
	switch c {
	case ReadOnly:
		return "read-only"
	case Dangerous:
		return "dangerous"
	case Forbidden:
		return "forbidden"
	}
	return "unclassified"
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// ReadOnlyCommands are the commands the classification lets run.
var ReadOnlyCommands = set("cat", "ls", "pwd", "grep", "egrep", "fgrep", "rg", "find", "fd", "fdfind", "head", "tail", "wc",
	"echo", "printf", "which", "whoami", "id", "groups", "date", "uname", "hostname", "file", "stat", "du", "df", "tree",
	"diff", "cmp", "comm", "sort", "uniq", "cut", "tr", "basename", "dirname", "realpath", "readlink", "sha1sum",
	"sha224sum", "sha256sum", "sha384sum", "sha512sum", "md5sum", "cksum", "b2sum", "jq", "less", "more", "column", "nl",
	"od", "hexdump", "xxd", "strings", "true", "false", "test", "[", "seq", "type", "sed", "awk", "gawk", "mawk", "nawk",
	"cd", "pushd", "popd", "dirs", ":", "join", "paste", "fold", "fmt", "expand", "unexpand", "rev", "tac", "nproc",
	"uptime", "tty", "sleep", "command", "look", "locale", "arch", "getconf", "zcat", "zgrep", "wait", "exit", "return",
	"break", "continue", "shift", "getopts", "read", "unset", "local", "umask", "ulimit", "times", "help")

// DangerousCommands write, delete, reach the network or run arbitrary code:
// they need a person.
var DangerousCommands = set("rm", "rmdir", "mv", "cp", "mkdir", "chmod", "chown", "chgrp", "ln", "touch", "truncate",
	"dd", "shred", "tee", "install", "rsync", "scp", "sftp", "curl", "wget", "nc", "ncat", "netcat", "socat", "ssh",
	"telnet", "ftp", "kill", "pkill", "killall", "crontab", "at", "batch", "npm", "npx", "yarn", "pnpm", "pip", "pip3",
	"pipx", "gem", "cargo", "apt", "apt-get", "dpkg", "yum", "dnf", "brew", "docker", "podman", "kubectl", "helm",
	"terraform", "make", "cmake", "patch", "unzip", "tar", "gzip", "gunzip", "zip", "bzip2", "xz", "unlink", "systemctl",
	"service", "python", "python3", "node", "perl", "ruby", "php", "go", "java", "xargs", "env", "printenv", "git")

// ForbiddenCommands change the machine itself and never run.
var ForbiddenCommands = set("sudo", "su", "doas", "pkexec", "shutdown", "reboot", "halt", "poweroff", "init", "telinit",
	"mkfs", "fdisk", "sfdisk", "cfdisk", "parted", "gdisk", "wipefs", "mkswap", "swapon", "swapoff", "mount", "umount",
	"insmod", "rmmod", "modprobe", "sysctl", "iptables", "ip6tables", "nft", "useradd", "userdel", "usermod", "groupadd",
	"groupdel", "passwd", "chpasswd", "visudo", "chroot", "nsenter", "unshare", "pivot_root", "kexec", "dmsetup",
	"cryptsetup", "losetup", "setcap", "chattr")

// GitReadOnly are the git subcommands that only read.
var GitReadOnly = set("status", "log", "diff", "show", "ls-files", "ls-tree", "rev-parse", "rev-list", "blame",
	"annotate", "describe", "shortlog", "cat-file", "grep", "name-rev", "merge-base", "for-each-ref", "show-ref",
	"whatchanged", "count-objects", "check-ignore", "check-attr", "var", "version", "show-branch", "cherry",
	"range-diff", "diff-tree", "diff-files", "diff-index", "verify-commit", "verify-tag")

// Classify returns the class of a command given its base name and its
// literal arguments, with a reason.
func Classify(name string, args []string) (Class, string) {
	switch {
	case ForbiddenCommands[name] || strings.HasPrefix(name, "mkfs."):
		return Forbidden, name + " changes the system and is forbidden"
	case name == "git":
		return classifyGit(args)
	case name == "command":
		return ReadOnly, "command -v looks a name up"
	case ReadOnlyCommands[name]:
		return ReadOnly, name + " only reads"
	case DangerousCommands[name]:
		return Dangerous, name + " can write, delete, run code or reach the network"
	}
	return Unclassified, name + " is not a known read-only command"
}

func classifyGit(args []string) (Class, string) {
	// git's own options, parsed as git parses them; the subcommand is the
	// first operand.
	ws := make([]Word, len(args))
	for j, a := range args {
		ws[j] = Word{Value: a, Literal: true}
	}
	p := gitGlobalSpec.parse(ws)
	if len(p.operands) == 0 {
		return ReadOnly, "git without a subcommand prints help"
	}
	sub := p.operands[0].Value
	var rest []string
	for _, w := range p.operands[1:] {
		rest = append(rest, w.Value)
	}
	var opts, operands []string
	for _, a := range rest {
		if strings.HasPrefix(a, "-") {
			opts = append(opts, a)
		} else {
			operands = append(operands, a)
		}
	}
	// has reports an option given by its name or, for long options, by a
	// unique prefix of it, as git's option parser takes it.
	has := func(names ...string) bool {
		for _, o := range opts {
			n, _, _ := strings.Cut(o, "=")
			for _, x := range names {
				if n == x || (strings.HasPrefix(n, "--") && len(n) > 3 && strings.HasPrefix(x, n)) {
					return true
				}
			}
		}
		return false
	}
	first := ""
	if len(operands) > 0 {
		first = operands[0]
	}
	ro := false
	switch sub {
	case "branch":
		ro = !has("-d", "-D", "-m", "-M", "-c", "-C", "-f", "--delete", "--move", "--copy", "--force", "--set-upstream-to",
			"-u", "--unset-upstream", "--edit-description", "-t", "--track", "--no-track") &&
			(len(operands) == 0 || has("-l", "--list", "--contains", "--no-contains", "--merged", "--no-merged", "--points-at"))
	case "tag":
		ro = !has("-a", "-s", "-d", "-f", "-m", "-F", "-u", "-e", "--delete", "--annotate", "--sign", "--force", "--message",
			"--file", "--local-user", "--edit") && (len(operands) == 0 || has("-l", "--list", "--contains", "--points-at", "--merged", "--no-merged"))
	case "remote":
		ro = len(operands) == 0 || first == "show" || first == "get-url"
	case "config":
		ro = has("--get", "--get-all", "--get-regexp", "--list", "-l", "--get-urlmatch", "--get-color", "--get-colorbool") ||
			first == "get" || first == "list"
	case "stash":
		ro = first == "list" || first == "show"
	case "reflog":
		ro = first == "" || first == "show"
	case "worktree":
		ro = first == "list"
	case "notes":
		ro = first == "" || first == "list" || first == "show"
	case "submodule":
		ro = first == "" || first == "status"
	default:
		ro = GitReadOnly[sub]
	}
	if ro {
		return ReadOnly, "git " + sub + " only reads"
	}
	return Dangerous, "git " + sub + " writes to the repository or reaches a remote"
}
