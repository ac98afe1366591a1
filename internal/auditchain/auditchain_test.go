package auditchain

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// chain is a sound chain of n links: link i's hash is "h<i>".
func chain(n int) []Link {
	var out []Link
	for i := 1; i <= n; i++ {
		l := Link{Seq: uint64(i), Hash: fmt.Sprintf("h%d", i), ID: fmt.Sprintf("e%d", i)}
		if i > 1 {
			l.Prev = fmt.Sprintf("h%d", i-1)
		}
		out = append(out, l)
	}
	return out
}

func TestCheck(t *testing.T) {
	five := Checkpoint{Seq: 5, Head: "h5", ID: "cp5"}
	tests := []struct {
		name    string
		links   func([]Link) []Link
		cps     []Checkpoint
		want    string // a problem contains it; "" for none
		checked uint64
	}{
		{"sound", func(l []Link) []Link { return l }, []Checkpoint{five}, "", 5},
		{"sound, stored out of order", func(l []Link) []Link { return append([]Link{l[4], l[2]}, append(l[:2:2], l[3])...) }, []Checkpoint{five}, "", 5},
		{"removed in the middle", func(l []Link) []Link { return append(l[:2:2], l[3:]...) }, []Checkpoint{five}, "events 3-3 are missing", 5},
		{"removed first", func(l []Link) []Link { return l[1:] }, []Checkpoint{five}, "events 1-1 are missing", 5},
		{"removed last", func(l []Link) []Link { return l[:4] }, []Checkpoint{five}, "the last ones were removed", 0},
		{"changed", func(l []Link) []Link { l[2].Hash = "x"; return l }, []Checkpoint{five}, "event 4 (e4) does not follow event 3", 5},
		{"changed last", func(l []Link) []Link { l[4].Hash = "x"; return l }, []Checkpoint{five}, "names another head", 0},
		{"inserted again", func(l []Link) []Link { return append(l, l[1]) }, []Checkpoint{five}, "event 2 (e2) is stored twice", 5},
		{"inserted at a position", func(l []Link) []Link { return append(l, Link{Seq: 3, Prev: "h2", Hash: "y", ID: "evil"}) }, []Checkpoint{five}, "two events at position 3", 5},
		{"inserted first", func(l []Link) []Link { l[0].Prev = "h0"; return l }, nil, "event 1 (e1) names a predecessor", 0},
		{"no checkpoint yet", func(l []Link) []Link { return l }, nil, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Chains
			for _, l := range tt.links(chain(5)) {
				c.Add("w-1", l)
			}
			c.AddCheckpoint("w-1", Checkpoint{Seq: 0, ID: "open", Opening: true})
			for _, cp := range tt.cps {
				c.AddCheckpoint("w-1", cp)
			}
			rs := c.Check()
			if len(rs) != 1 {
				t.Fatalf("reports %+v", rs)
			}
			r := rs[0]
			got := strings.Join(r.Problems, "; ")
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) || r.Checked != tt.checked {
				t.Fatalf("problems %q checked %d; want %q checked %d", got, r.Checked, tt.want, tt.checked)
			}
		})
	}
}

// TestCheckEnds covers how chains end and begin: a closing checkpoint,
// a live worker's open tail, a dead worker's lost tail, a removed
// opening, and a whole chain removed that a later opening names.
func TestCheckEnds(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	opening := Checkpoint{Seq: 0, ID: "open", Opening: true, Time: now.Add(-time.Hour)}
	closing := Checkpoint{Seq: 5, Head: "h5", ID: "close", Final: true, Time: now.Add(-30 * time.Minute)}
	tests := []struct {
		name  string
		links int
		cps   []Checkpoint
		other map[string][]Checkpoint // checkpoints of other chains (no links)
		want  []string                // problems, by chain, each contains; nil: none
		open  bool
	}{
		{name: "closed", links: 5, cps: []Checkpoint{opening, closing}},
		{name: "open, worker live", links: 5, cps: []Checkpoint{opening, {Seq: 3, Head: "h3", ID: "cp3", Time: now.Add(-time.Minute)}}, open: true},
		{name: "tail and closing checkpoint removed, worker gone", links: 3,
			cps:  []Checkpoint{opening, {Seq: 3, Head: "h3", ID: "cp3", Time: now.Add(-time.Hour)}},
			want: []string{"w-1: it ends without its closing checkpoint"}},
		{name: "closing checkpoint counts more than present", links: 3, cps: []Checkpoint{opening, closing},
			want: []string{"w-1: checkpoint close says 5 events; the chain has 3"}},
		{name: "events after the closing checkpoint", links: 6, cps: []Checkpoint{opening, closing},
			want: []string{"w-1: events 6-6 come after its closing checkpoint"}},
		{name: "opening removed", links: 5, cps: []Checkpoint{closing},
			want: []string{"w-1: its opening checkpoint is missing"}},
		{name: "a whole earlier chain removed", links: 5,
			cps:  []Checkpoint{{Seq: 0, ID: "open", Opening: true, Anchor: "w-0:7:h7"}, closing},
			want: []string{"w-0: the whole chain is missing"}},
		{name: "anchor at another head", links: 5,
			cps:   []Checkpoint{{Seq: 0, ID: "open", Opening: true, Anchor: "w-0:0:x"}, closing},
			other: map[string][]Checkpoint{"w-0": {{Seq: 0, ID: "open0", Opening: true}, {Seq: 0, ID: "close0", Final: true}}},
			want:  []string{"w-1: its opening names event 0 of chain w-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Chains{Now: now, LiveWithin: 3 * time.Minute}
			for _, l := range chain(tt.links) {
				c.Add("w-1", l)
			}
			for _, cp := range tt.cps {
				c.AddCheckpoint("w-1", cp)
			}
			for id, cps := range tt.other {
				for _, cp := range cps {
					c.AddCheckpoint(id, cp)
				}
			}
			var got []string
			open := false
			for _, r := range c.Check() {
				open = open || r.Open
				for _, p := range r.Problems {
					got = append(got, r.Chain+": "+p)
				}
			}
			if len(got) != len(tt.want) || open != tt.open {
				t.Fatalf("problems %q open %v; want %q open %v", got, open, tt.want, tt.open)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Fatalf("problem %q; want it to say %q", got[i], w)
				}
			}
		})
	}
}
