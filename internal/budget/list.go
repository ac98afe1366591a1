package budget

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/policy"
)

// Filter selects counters for List; empty fields match everything.
type Filter struct {
	Agent   string
	Session string
}

// List reads every budget counter of the bucket kv that f selects, with
// lapsed leases dropped and a past window shown as reset, sorted by
// budget, agent, session and tool.
func List(ctx context.Context, kv jetstream.KeyValue, f Filter) ([]Usage, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list budget counters: %w", err)
	}
	defer lister.Stop()
	now := time.Now().UTC()
	var out []Usage
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read budget counter %s: %w", key, err)
		}
		u, err := parseUsage(e.Value())
		if err != nil {
			return nil, fmt.Errorf("budget counter %s (the next charge to it rebuilds it): %w", key, err)
		}
		if f.Agent != "" && u.Agent != f.Agent || f.Session != "" && u.Session != f.Session {
			continue
		}
		u.roll(policy.Budget{Per: time.Duration(u.PerMS) * time.Millisecond}, now)
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Budget != b.Budget {
			return a.Budget < b.Budget
		}
		if a.Agent != b.Agent {
			return a.Agent < b.Agent
		}
		if a.Session != b.Session {
			return a.Session < b.Session
		}
		return a.Tool < b.Tool
	})
	return out, nil
}
