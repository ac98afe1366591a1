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
			line: "worker (devel) commit unknown built unknown " + Get().Go, shortWant: "(devel)"},
		{name: "go install of a tag", ok: true,
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/toolgate/toolgate", Version: "v1.2.3"}},
			want: Info{Version: "v1.2.3", Go: "go1.26.8"},
			line: "worker v1.2.3 commit unknown built unknown go1.26.8", shortWant: "v1.2.3"},
		{name: "clone build", ok: true,
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-05-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			want: Info{Version: Devel, Commit: rev, Date: "2026-05-01T10:00:00Z", Modified: true, Go: "go1.26.8"},
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
