// Package version tells which build of toolgate is running: the module
// version, the commit and the commit's date, read from the build
// information the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo). `go install
// github.com/toolgate/toolgate/cmd/worker@v1.2.3` therefore reports
// v1.2.3 with no -ldflags; a binary built in a clone reports the commit it
// was built from (the toolchain stamps vcs.revision unless -buildvcs=false).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// Info describes one build.
type Info struct {
	// Version is the main module's version: a tag (v1.2.3), a pseudo
	// version, or "(devel)" for a build in a clone.
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, empty when the
	// toolchain recorded none.
	Commit string `json:"commit,omitempty"`
	// Date is the commit's time (vcs.time, RFC 3339): the build's date as
	// far as a reproducible build can tell one.
	Date string `json:"date,omitempty"`
	// Modified is true when the work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain that built the binary.
	Go string `json:"go"`
}

// Devel is the version of a build with no module version.
const Devel = "(devel)"

var (
	once sync.Once
	info Info
)

// Get returns the running binary's build information.
func Get() Info {
	once.Do(func() {
		bi, ok := debug.ReadBuildInfo()
		info = FromBuildInfo(bi, ok)
	})
	return info
}

// FromBuildInfo extracts Info from build information; ok false (no build
// information, as in a binary built without module support) gives Devel.
func FromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	i := Info{Version: Devel, Go: runtime.Version()}
	if !ok || bi == nil {
		return i
	}
	if v := bi.Main.Version; v != "" {
		i.Version = v
	}
	if bi.GoVersion != "" {
		i.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.time":
			i.Date = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Short is the version and, when known, the first 12 characters of the
// commit: "v1.2.3", "(devel) 0123456789ab", "(devel) 0123456789ab+dirty".
func (i Info) Short() string {
	s := i.Version
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " " + c
		if i.Modified {
			s += "+dirty"
		}
	}
	return s
}

// String is the line `--version` prints for program:
//
//	worker v1.2.3 commit 0123456789abcdef… built 2026-05-01T10:00:00Z go1.26.8
//
// with "commit unknown" and "built unknown" when the toolchain recorded
// neither.
func (i Info) String(program string) string {
	commit, date := i.Commit, i.Date
	if commit == "" {
		commit = "unknown"
	} else if i.Modified {
		commit += "+dirty"
	}
	if date == "" {
		date = "unknown"
	}
	return fmt.Sprintf("%s %s commit %s built %s %s", program, i.Version, commit, date, i.Go)
}
