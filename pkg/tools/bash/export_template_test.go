//go:build linux

package bash

import (
	"testing"

	"github.com/toolgate/toolgate/pkg/tools"
)

// Templated is what a test sees of a tool whose prepared sandboxes are
// sandbox templates.
type Templated struct {
	Tool *tools.Tool
	b    *bash
}

// NewTemplated is New with Config.Prepared, its sandboxes served by
// templates; the test is skipped where there can be none (the worker is
// not root, or call cgroups are not in a v1 hierarchy). The templates
// are retired when t ends.
func NewTemplated(t testing.TB, cfg Config) *Templated {
	t.Helper()
	b := newPrepared(t, cfg)
	if !b.pool.tmpl {
		t.Skip("no sandbox template here: it needs the worker to run as root and per-call cgroups in a v1 hierarchy")
	}
	return &Templated{Tool: b.tool(), b: b}
}

// Used is how many calls ran in a prepared sandbox or a template.
func (s *Templated) Used() int { return int(s.b.pool.used.Load()) }

// Settle waits until the templates being started are ready.
func (s *Templated) Settle() { s.b.pool.wg.Wait() }

// Pids are the pids of the templates ready, on the host.
func (s *Templated) Pids() []int { return s.b.pool.templatePids() }

// templatePids are the pids of the templates ready, on the host.
func (p *pool) templatePids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, t := range p.templates {
		out = append(out, t.tpid)
	}
	return out
}
