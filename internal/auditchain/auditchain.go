// Package auditchain checks the audit trail's chains: each worker run
// writes its audit events as one chain (pkg/events.AuditData's Chain, Seq
// and Prev, inside the signed data) and signs checkpoints of it
// (dev.toolgate.audit.checkpoint.v1), as Certificate Transparency signs
// tree heads. Given the verified events and checkpoints of the stream, in
// any order, it reports every break: an event missing (removed), one that
// does not follow the one before (changed), one stored twice or a second
// event at a position (inserted), a checkpoint the chain does not reach
// or whose head differs (removed or changed at the tail), a chain without
// its opening checkpoint, a chain whose worker is gone without its
// closing checkpoint (its tail lost or removed), and a whole chain
// removed that a later chain's opening names (its anchor).
package auditchain

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
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
	// Time is when it was made.
	Time time.Time
	// Opening marks the chain's first checkpoint, Anchor the checkpoint
	// of another chain it names ("<chain>:<seq>:<head>"), Final the
	// closing one.
	Opening, Final bool
	Anchor         string
	// AnchorTime is when the checkpoint Anchor names was made.
	AnchorTime time.Time
}

// Chains collects links and checkpoints by chain.
type Chains struct {
	// Now and LiveWithin tell a chain whose worker runs from one whose
	// worker is gone: a chain without its closing checkpoint is open (its
	// worker running) while its last checkpoint is less than LiveWithin
	// older than Now; older, its tail is reported lost. A zero Now takes
	// every chain without its closing checkpoint as open.
	Now        time.Time
	LiveWithin time.Duration
	// Horizon is the audit stream's retention horizon (Now less its
	// maximum age; zero: none): a chain an anchor names that is missing
	// and was checkpointed before it expired, rather than was removed.
	Horizon time.Time

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
	// Open says the chain has no closing checkpoint and its worker still
	// runs (its last checkpoint is recent): its tail is still growing.
	Open bool
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
	heads := map[string]map[uint64]string{} // chain -> seq -> hash, for the anchors
	for _, id := range ids {
		out = append(out, c.check(id, c.links[id], c.checkpoints[id]))
		h := map[uint64]string{0: ""}
		for _, l := range c.links[id] {
			h[l.Seq] = l.Hash
		}
		heads[id] = h
	}
	// Anchors: the chain an opening names must be there, at that head.
	var removed []Report
	missing := map[string]int{}
	for i := range out {
		for _, cp := range c.checkpoints[out[i].Chain] {
			if !cp.Opening || cp.Anchor == "" {
				continue
			}
			chain, seq, head, ok := parseAnchor(cp.Anchor)
			if !ok {
				out[i].Problems = append(out[i].Problems, fmt.Sprintf("its opening %s names no checkpoint (%q): changed", cp.ID, cp.Anchor))
				continue
			}
			h, present := heads[chain]
			switch {
			case !present && !c.Horizon.IsZero() && cp.AnchorTime.Before(c.Horizon):
				// Expired with the stream's retention.
			case !present:
				if j, seen := missing[chain]; seen {
					removed[j].Problems = append(removed[j].Problems, "the opening of chain "+out[i].Chain+" names it too")
					continue
				}
				missing[chain] = len(removed)
				removed = append(removed, Report{Chain: chain, Problems: []string{fmt.Sprintf(
					"the whole chain is missing: removed (the opening of chain %s names its checkpoint at event %d)", out[i].Chain, seq)}})
			case h[seq] != head:
				out[i].Problems = append(out[i].Problems, fmt.Sprintf(
					"its opening names event %d of chain %s, which is missing or other: removed or changed", seq, chain))
			}
		}
	}
	out = append(out, removed...)
	slices.SortFunc(out, func(a, b Report) int { return strings.Compare(a.Chain, b.Chain) })
	return out
}

// parseAnchor splits an anchor "<chain>:<seq>:<head>".
func parseAnchor(a string) (chain string, seq uint64, head string, ok bool) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return "", 0, "", false
	}
	head = a[i+1:]
	j := strings.LastIndexByte(a[:i], ':')
	if j <= 0 {
		return "", 0, "", false
	}
	n, err := strconv.ParseUint(a[j+1:i], 10, 64)
	if err != nil {
		return "", 0, "", false
	}
	return a[:j], n, head, true
}

func (c *Chains) check(chain string, links []Link, cps []Checkpoint) Report {
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
	var (
		opening, final bool
		lastCP         time.Time
	)
	for _, cp := range cps {
		opening = opening || cp.Opening
		if cp.Time.After(lastCP) {
			lastCP = cp.Time
		}
		if cp.Final {
			final = true
			if prev != nil && prev.Seq > cp.Seq {
				bad("events %d-%d come after its closing checkpoint %s: inserted", cp.Seq+1, prev.Seq, cp.ID)
			}
		}
		if cp.Seq == 0 {
			if cp.Head != "" {
				bad("checkpoint %s names a head before any event: changed", cp.ID)
			}
			continue
		}
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
	if !opening {
		bad("its opening checkpoint is missing: removed (or the chain was written before chains were anchored)")
	}
	if !final {
		age := c.Now.Sub(lastCP)
		switch {
		case c.Now.IsZero() || (len(cps) > 0 && age < c.LiveWithin):
			r.Open = true
		case len(cps) == 0:
			bad("it has no checkpoint at all and no closing checkpoint: its worker is gone and its checkpoints were removed")
		default:
			bad("it ends without its closing checkpoint and its last checkpoint is %s old: its worker died or its tail and closing checkpoint were removed; events after %d may be missing",
				age.Round(time.Second), r.Checked)
		}
	}
	return r
}
