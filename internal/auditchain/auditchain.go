// Package auditchain checks the audit trail's chains: each worker run
// writes its audit events as one chain (pkg/events.AuditData's Chain, Seq
// and Prev, inside the signed data) and signs checkpoints of it
// (dev.toolgate.audit.checkpoint.v1), as Certificate Transparency signs
// tree heads. Given the verified events and checkpoints of the stream, in
// any order, it reports every break: an event missing (removed), one that
// does not follow the one before (changed), one stored twice or a second
// event at a position (inserted), and a checkpoint the chain does not
// reach or whose head differs (removed or changed at the tail).
package auditchain

import (
	"fmt"
	"slices"
)

// Link is one audit event of a chain.
type Link struct {
	Seq        uint64
	Prev, Hash string
	// ID is the event's id, for the report.
	ID string
}

// Checkpoint is a signed statement of a chain's length and head.
type Checkpoint struct {
	Seq  uint64
	Head string
	ID   string
}

// Chains collects links and checkpoints by chain.
type Chains struct {
	links       map[string][]Link
	checkpoints map[string][]Checkpoint
}

// Add records a link of chain.
func (c *Chains) Add(chain string, l Link) {
	if c.links == nil {
		c.links = map[string][]Link{}
	}
	c.links[chain] = append(c.links[chain], l)
}

// AddCheckpoint records a checkpoint of chain.
func (c *Chains) AddCheckpoint(chain string, cp Checkpoint) {
	if c.checkpoints == nil {
		c.checkpoints = map[string][]Checkpoint{}
	}
	c.checkpoints[chain] = append(c.checkpoints[chain], cp)
}

// Report is what Check found of one chain.
type Report struct {
	Chain string
	// Events is how many distinct links it holds; Checked how many of
	// them the last good checkpoint vouches for.
	Events, Checked uint64
	// Problems are the breaks, each a sentence; none for a sound chain.
	Problems []string
}

// Check reports on every chain, sorted by chain id.
func (c *Chains) Check() []Report {
	ids := make([]string, 0, len(c.links)+len(c.checkpoints))
	for id := range c.links {
		ids = append(ids, id)
	}
	for id := range c.checkpoints {
		if _, ok := c.links[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]Report, 0, len(ids))
	for _, id := range ids {
		out = append(out, check(id, c.links[id], c.checkpoints[id]))
	}
	return out
}

func check(chain string, links []Link, cps []Checkpoint) Report {
	r := Report{Chain: chain}
	bad := func(format string, a ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, a...)) }
	slices.SortStableFunc(links, func(a, b Link) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	at := map[uint64]Link{}
	var prev *Link
	for i := range links {
		l := links[i]
		if old, ok := at[l.Seq]; ok {
			if old.Hash == l.Hash {
				bad("event %d (%s) is stored twice: inserted again", l.Seq, l.ID)
			} else {
				bad("two events at position %d (%s, %s): one was inserted", l.Seq, old.ID, l.ID)
			}
			continue
		}
		at[l.Seq] = l
		r.Events++
		switch {
		case prev == nil && l.Seq != 1:
			bad("events 1-%d are missing: removed (or expired from the stream)", l.Seq-1)
		case prev == nil && l.Prev != "":
			bad("event 1 (%s) names a predecessor: inserted", l.ID)
		case prev != nil && l.Seq > prev.Seq+1:
			bad("events %d-%d are missing: removed", prev.Seq+1, l.Seq-1)
		case prev != nil && l.Prev != prev.Hash:
			bad("event %d (%s) does not follow event %d (%s): one of them was changed or inserted", l.Seq, l.ID, prev.Seq, prev.ID)
		}
		prev = &links[i]
	}
	for _, cp := range cps {
		l, ok := at[cp.Seq]
		switch {
		case !ok && (prev == nil || cp.Seq > prev.Seq):
			bad("checkpoint %s says %d events; the chain has %d: the last ones were removed", cp.ID, cp.Seq, r.Events)
		case !ok:
			bad("checkpoint %s vouches for event %d, which is missing: removed", cp.ID, cp.Seq)
		case l.Hash != cp.Head:
			bad("checkpoint %s names another head than event %d (%s): changed", cp.ID, cp.Seq, l.ID)
		default:
			r.Checked = max(r.Checked, cp.Seq)
		}
	}
	return r
}
