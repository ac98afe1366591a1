//go:build linux

package sandboxinit

import "strconv"

// parseTemplate is the Template whose Args (without the program's path)
// are args.
func parseTemplate(args []string) (Template, error) {
	var t Template
	for _, a := range args {
		switch {
		case hasPrefix(a, flagTemplate):
			c, r, _ := cut(trimPrefix(a, flagTemplate), ":")
			fd, err1 := strconv.ParseUint(c, 10, 31)
			rd, err2 := strconv.ParseUint(r, 10, 31)
			if err1 != nil || err2 != nil || fd < 3 || rd < 3 {
				return t, newError("bad " + a + ": want " + flagTemplate + "CTL:READY, both 3 or more")
			}
			t.Ctl, t.Ready = int(fd), int(rd)
		case hasPrefix(a, flagSeccomp):
			fd, err := strconv.ParseUint(trimPrefix(a, flagSeccomp), 10, 31)
			if err != nil || fd < 3 {
				return t, newError("bad " + a + ": want " + flagSeccomp + "FD, FD 3 or more")
			}
			t.Seccomp = int(fd)
		case hasPrefix(a, flagCgroupHome):
			fd, err := strconv.ParseUint(trimPrefix(a, flagCgroupHome), 10, 31)
			if err != nil || fd < 3 {
				return t, newError("bad " + a + ": want " + flagCgroupHome + "FD, FD 3 or more")
			}
			t.Home = append(t.Home, int(fd))
		case hasPrefix(a, flagNoexec):
			t.Noexec = append(t.Noexec, trimPrefix(a, flagNoexec))
		case hasPrefix(a, flagKeepExec):
			t.KeepExec = append(t.KeepExec, trimPrefix(a, flagKeepExec))
		case a == flagTemplateNet:
			t.Network = true
		case hasPrefix(a, flagRlimit):
			r, v, _ := cut(trimPrefix(a, flagRlimit), ":")
			res, err1 := strconv.ParseUint(r, 10, 31)
			val, err2 := strconv.ParseUint(v, 10, 64)
			if err1 != nil || err2 != nil {
				return t, newError("bad " + a + ": want " + flagRlimit + "RESOURCE:VALUE")
			}
			t.Limits = append(t.Limits, Rlimit{int(res), val})
		case hasPrefix(a, flagTemplateCall):
			n, err := strconv.ParseUint(trimPrefix(a, flagTemplateCall), 10, 31)
			if err != nil {
				return t, newError("bad " + a + ": want " + flagTemplateCall + "N")
			}
			t.Calls = int(n)
		default:
			return t, newError("unknown template argument " + strconv.Quote(a))
		}
	}
	if t.Ctl == 0 || t.Seccomp == 0 {
		return t, newError("a template needs " + flagTemplate + " and " + flagSeccomp)
	}
	return t, nil
}
