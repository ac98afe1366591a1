package auditchain

import (
	"fmt"
	"strings"
	"testing"
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
