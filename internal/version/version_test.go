package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name      string
		bi        *debug.BuildInfo
		ok        bool
		want      Info
		line      string
		shortWant string
	}{
		{name: "no build info", ok: false,
			want: Info{Version: Devel, Go: Get().Go},
			line: "worker (devel) from an unknown module source without version control information (built with -buildvcs=false, or outside a git clone and a git archive) " + Get().Go, shortWant: "(devel)"},
		{name: "no VCS stamp", ok: true,
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/toolgate/toolgate", Version: "(devel)"}},
			want: Info{Version: Devel, Go: "go1.26.8", Module: "github.com/toolgate/toolgate"},
			line: "worker (devel) from github.com/toolgate/toolgate source without version control information (built with -buildvcs=false, or outside a git clone and a git archive) go1.26.8", shortWant: "(devel)"},
		{name: "go install of a tag", ok: true,
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/toolgate/toolgate", Version: "v1.2.3"}},
			want: Info{Version: "v1.2.3", Go: "go1.26.8", Module: "github.com/toolgate/toolgate"},
			line: "worker v1.2.3 commit unknown built unknown go1.26.8", shortWant: "v1.2.3"},
		{name: "clone build", ok: true,
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-05-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			want: Info{Version: Devel, Commit: rev, Date: "2026-05-01T10:00:00Z", Modified: true, Go: "go1.26.8", Source: SourceVCS},
			line: "worker (devel) commit " + rev + "+dirty built 2026-05-01T10:00:00Z go1.26.8", shortWant: "(devel) 0123456789ab+dirty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromBuildInfo(tt.bi, tt.ok)
			if got != tt.want {
				t.Fatalf("FromBuildInfo = %+v, want %+v", got, tt.want)
			}
			if s := got.String("worker"); s != tt.line {
				t.Errorf("String = %q, want %q", s, tt.line)
			}
			if s := got.Short(); s != tt.shortWant {
				t.Errorf("Short = %q, want %q", s, tt.shortWant)
			}
		})
	}
}

// TestFromArchive: a build from a git archive reports the commit, date and
// tag git wrote into archive.txt; a clone's unsubstituted text, or a
// build the toolchain stamped, is left alone.
func TestFromArchive(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	devel := Info{Version: Devel, Go: "go1.26.8", Module: "github.com/toolgate/toolgate"}
	for _, tt := range []struct {
		name, text string
		in, want   Info
	}{
		{"a clone's text", "$Format:%H %cI %(describe:tags=true)$\n", devel, devel},
		{"at a tag", rev + " 2026-05-01T10:00:00+00:00 v1.2.3\n", devel,
			Info{Version: "v1.2.3", Commit: rev, Date: "2026-05-01T10:00:00+00:00", Go: "go1.26.8", Module: devel.Module, Source: SourceArchive}},
		{"at a pre-release tag", rev + " 2026-05-01T10:00:00+00:00 v1.2.3-rc.1\n", devel,
			Info{Version: "v1.2.3-rc.1", Commit: rev, Date: "2026-05-01T10:00:00+00:00", Go: "go1.26.8", Module: devel.Module, Source: SourceArchive}},
		{"past a tag", rev + " 2026-05-01T10:00:00+00:00 v1.2.3-4-g0123456\n", devel,
			Info{Version: Devel, Commit: rev, Date: "2026-05-01T10:00:00+00:00", Go: "go1.26.8", Module: devel.Module, Source: SourceArchive}},
		{"no tag", rev + " 2026-05-01T10:00:00+00:00\n", devel,
			Info{Version: Devel, Commit: rev, Date: "2026-05-01T10:00:00+00:00", Go: "go1.26.8", Module: devel.Module, Source: SourceArchive}},
		{"stamped already", rev + " 2026-05-01T10:00:00+00:00 v9.9.9\n", Info{Version: Devel, Commit: "abc", Source: SourceVCS},
			Info{Version: Devel, Commit: "abc", Source: SourceVCS}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := FromArchive(tt.in, tt.text); got != tt.want {
				t.Fatalf("FromArchive = %+v, want %+v", got, tt.want)
			}
		})
	}
}
