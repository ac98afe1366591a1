// Package version tells which build of toolgate is running: the module
// version, the commit and the commit's date, read from the build
// information the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo). `go install
// github.com/toolgate/toolgate/cmd/worker@v1.2.3` therefore reports
// v1.2.3 with no -ldflags; a binary built in a clone reports the commit it
// was built from (the toolchain stamps vcs.revision unless -buildvcs=false;
// at a tag, since Go 1.24, the tag as its version). A build from a source
// archive made by git archive (a release's "source code" download), where
// the toolchain has no repository to read, reports what git wrote into
// archive.txt (export-subst in .gitattributes): the commit, its date and
// the tag. A build with neither says so, and which module it is.
package version

import (
	_ "embed"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// archive is archive.txt: "$Format:...$" in a clone; in a git archive,
// "<commit> <commit date> <git describe --tags>".
//
//go:embed archive.txt
var archive string

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
	// Module is the main module's path (github.com/toolgate/toolgate).
	Module string `json:"module,omitempty"`
	// Source is where Commit came from: "vcs" (the toolchain read the
	// repository), "archive" (git archive wrote it), empty (unknown).
	Source string `json:"source,omitempty"`
}

// Sources of the commit (Info.Source).
const (
	SourceVCS     = "vcs"
	SourceArchive = "archive"
)

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
		info = FromArchive(FromBuildInfo(bi, ok), archive)
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
	i.Module = bi.Main.Path
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
	if i.Commit != "" {
		i.Source = SourceVCS
	}
	return i
}

// exactTag is a release tag as git describe prints it at the tag itself
// (v1.2.3, v1.2.3-rc.1), not past it (v1.2.3-4-g0123abc).
var exactTag = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// FromArchive completes i, which has no commit, from archive.txt's text
// as git archive substituted it: the commit, its date, and the tag as the
// version when the commit is the tag's. i with a commit, or text not
// substituted (a clone's), leaves i as it is.
func FromArchive(i Info, text string) Info {
	f := strings.Fields(text)
	if i.Commit != "" || len(f) < 2 || strings.HasPrefix(text, "$Format") || len(f[0]) < 40 {
		return i
	}
	i.Commit, i.Date, i.Source = f[0], f[1], SourceArchive
	if len(f) > 2 && i.Version == Devel && exactTag.MatchString(f[2]) && !regexp.MustCompile(`-\d+-g[0-9a-f]+$`).MatchString(f[2]) {
		i.Version = f[2]
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
	if i.Commit == "" && i.Version == Devel {
		// Nothing says which commit: say what is known and why.
		mod := i.Module
		if mod == "" {
			mod = "an unknown module"
		}
		return fmt.Sprintf("%s %s from %s source without version control information (built with -buildvcs=false, or outside a git clone and a git archive) %s",
			program, i.Version, mod, i.Go)
	}
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
