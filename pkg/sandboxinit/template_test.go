//go:build linux

package sandboxinit

import (
	"reflect"
	"strings"
	"testing"
)

// TestTemplateArgs: a template's command line reads back as what made
// it, and a bad one is refused with what is wrong.
func TestTemplateArgs(t *testing.T) {
	for _, tt := range []Template{
		{Ctl: 3, Ready: 4, Seccomp: 5},
		{Ctl: 7, Ready: 8, Seccomp: 9, Home: []int{10, 11}, Noexec: []string{"/tmp", "/dev/shm", "/ws"},
			KeepExec: []string{"/tmp/.toolgate-git/git"}, Network: true, Calls: 100,
			Limits: []Rlimit{{4, 0}, {0, 600}, {9, 1 << 40}}},
	} {
		args := tt.Args()
		if args[0] != Path {
			t.Errorf("%+v: path %q", tt, args[0])
		}
		got, err := parseTemplate(args[1:])
		if err != nil || !reflect.DeepEqual(got, tt) {
			t.Errorf("parseTemplate(%q) = %+v, %v; want %+v", args[1:], got, err, tt)
		}
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--template=3:4"}, "needs"},
		{[]string{"--seccomp=5"}, "needs"},
		{[]string{"--template=2:4", "--seccomp=5"}, "both 3 or more"},
		{[]string{"--template=3", "--seccomp=5"}, "CTL:READY"},
		{[]string{"--template=3:4", "--seccomp=x"}, "--seccomp=FD"},
		{[]string{"--template=3:4", "--seccomp=5", "--cgroup-home=1"}, "--cgroup-home=FD"},
		{[]string{"--template=3:4", "--seccomp=5", "--rlimit=4"}, "RESOURCE:VALUE"},
		{[]string{"--template=3:4", "--seccomp=5", "--rlimit=4:-1"}, "RESOURCE:VALUE"},
		{[]string{"--template=3:4", "--seccomp=5", "--calls=x"}, "--calls=N"},
		{[]string{"--template=3:4", "--seccomp=5", "--", "true"}, `unknown template argument "--"`},
	} {
		if _, err := parseTemplate(tt.args); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("parseTemplate(%q): error %v, want one containing %q", tt.args, err, tt.wantErr)
		}
	}
}
