// Package resultcache caches the results of read-only tool calls
// (read, ls, grep, glob) fleet-wide, in the JetStream KV bucket
// toolgate_cache, so that a call any worker already answered is not run
// again while what it read is unchanged.
//
// An entry's key is the SHA-256 of the tool, its canonical arguments, the
// calling agent and the gate's decision (the policy revision and the
// limits it sets), the workspace generation, and a fingerprint of what
// the call reads taken at the time of the call (fingerprint.go says what
// each fingerprint covers). A hit is therefore re-validated before it is
// served: the fingerprint is taken anew from the files and must match the
// one stored. Calls of tools that write (kinds write and execute: write,
// edit, bash, ...) bump the workspace generation, a key of the same
// bucket every worker reads, so that an edit through any worker retires
// every entry at once; a change made outside toolgate is caught by the
// fingerprint. The output is stored only when the fingerprint and the
// generation are the same after the tool ran as before.
//
// Caching is off unless configured (Config.Enabled). A served result
// says so: tools.Output.Cached, the result's and the audit's "cached".
package resultcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/internal/bus"
	papproval "github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

// DefaultTTL is how long an entry is served when Config.TTL is zero.
const DefaultTTL = 5 * time.Minute

// Config turns the cache on. The zero value is off.
type Config struct {
	// Enabled turns caching of read-only tools' results on.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// TTL is how long an entry may be served; default 5 minutes, at
	// most the bucket's age (bus.Config.CacheMaxAge, one hour).
	TTL time.Duration `yaml:"ttl" json:"ttl"`
}

// Validate names the field that is wrong.
func (c Config) Validate() error {
	if c.TTL < 0 {
		return fmt.Errorf("cache.ttl: %s is negative", c.TTL)
	}
	return nil
}

// Cache is the result cache of one worker over the fleet's bucket.
type Cache struct {
	kv    jetstream.KeyValue
	ws    *workspace.Workspace
	scope string
	ttl   time.Duration
	log   *slog.Logger

	hits, misses, stored atomic.Int64
}

// New opens the cache bucket (provisioned by internal/bus) for the
// workspace dir and its extra roots, as the file tools see them.
func New(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger, dir string, roots ...string) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bus.BucketCache)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bus.BucketCache, err)
	}
	ws, err := workspace.Open(dir, roots...)
	if err != nil {
		return nil, fmt.Errorf("result cache: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	sum := sha256.Sum256([]byte(ws.Dir()))
	return &Cache{kv: kv, ws: ws, scope: hex.EncodeToString(sum[:8]), ttl: ttl, log: log}, nil
}

// Close releases the cache's workspace.
func (c *Cache) Close() error { return c.ws.Close() }

// Stats are the cache's counters since it started.
type Stats struct{ Hits, Misses, Stored int64 }

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Stored: c.stored.Load()}
}

// entry is what the bucket holds per cached call.
type entry struct {
	Tool        string         `json:"tool"`
	Fingerprint string         `json:"fingerprint"`
	Generation  string         `json:"generation"`
	Stored      time.Time      `json:"stored"`
	Content     string         `json:"content"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

func (c *Cache) genKey() string { return "gen." + c.scope }

// generation is the workspace's current generation ("" before any write).
func (c *Cache) generation(ctx context.Context) (string, error) {
	e, err := c.kv.Get(ctx, c.genKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

// Bump starts a new workspace generation: every worker's entries made
// before are no longer served.
func (c *Cache) Bump(ctx context.Context) error {
	_, err := c.kv.Put(ctx, c.genKey(), []byte(nuid.Next()))
	return err
}

// writes reports whether a tool's calls may change files.
func writes(t *tools.Tool) bool {
	return t.Kind == policy.KindWrite || t.Kind == policy.KindExecute
}

// key is the entry key of call x at generation gen with fingerprint fp.
func (c *Cache) key(x *tools.Call, gen, fp string) (string, error) {
	args, err := papproval.Canonical(x.Arguments)
	if err != nil {
		return "", errUncacheable
	}
	var d policy.Decision
	if x.Decision != nil {
		d = *x.Decision
		d.Reason, d.Offending = "", ""
	}
	dec, _ := json.Marshal(d)
	h := sha256.New()
	for _, part := range []string{c.scope, x.Tool.Name, x.Agent, string(dec), fmt.Sprint(x.Approved), string(args), gen, fp} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return "r." + hex.EncodeToString(h.Sum(nil)), nil
}

// Middleware serves cacheable calls from the cache when what they read
// is unchanged, stores their outputs otherwise, and bumps the workspace
// generation after every call of a tool that writes. Any failure of the
// cache itself runs the call uncached. Install it after the gate (and
// after delegation's middleware): only allowed calls reach it.
func (c *Cache) Middleware(next tools.Handler) tools.Handler {
	return tools.HandlerFunc(func(ctx context.Context, x *tools.Call) (*tools.Output, error) {
		if writes(x.Tool) {
			out, err := next.Handle(ctx, x)
			// Even a failed call may have changed files.
			if berr := c.Bump(context.WithoutCancel(ctx)); berr != nil {
				c.log.Warn("result cache: bump the workspace generation", "call_id", x.ID, "tool", x.Tool.Name, "err", berr)
			}
			return out, err
		}
		fp, ok := fingerprinters[x.Tool.Name]
		if !ok || x.Tool.Category != "builtin" {
			return next.Handle(ctx, x)
		}
		gen, err := c.generation(ctx)
		if err != nil {
			c.log.Warn("result cache: read the generation", "err", err)
			return next.Handle(ctx, x)
		}
		before, err := fp(ctx, c.ws, x)
		if err != nil {
			// Missing, refused, too big: the tool says so itself.
			return next.Handle(ctx, x)
		}
		key, err := c.key(x, gen, before)
		if err != nil {
			return next.Handle(ctx, x)
		}
		if out, ok := c.lookup(ctx, key, x, gen, before); ok {
			c.hits.Add(1)
			return out, nil
		}
		c.misses.Add(1)
		out, err := next.Handle(ctx, x)
		if err != nil || out == nil || out.IsError {
			return out, err
		}
		// Store only what is still true: the same content as before the
		// tool ran, at the same generation.
		after, ferr := fp(ctx, c.ws, x)
		gen2, gerr := c.generation(ctx)
		if ferr != nil || gerr != nil || after != before || gen2 != gen {
			return out, nil
		}
		e := entry{Tool: x.Tool.Name, Fingerprint: before, Generation: gen, Stored: time.Now().UTC(), Content: out.Content, Metadata: out.Metadata}
		b, merr := json.Marshal(e)
		if merr != nil {
			return out, nil
		}
		if _, perr := c.kv.Put(context.WithoutCancel(ctx), key, b); perr != nil {
			c.log.Warn("result cache: store", "call_id", x.ID, "err", perr)
		} else {
			c.stored.Add(1)
		}
		return out, nil
	})
}

// lookup returns the entry under key when it is younger than the TTL and
// was made from the same reads at the same generation.
func (c *Cache) lookup(ctx context.Context, key string, x *tools.Call, gen, fp string) (*tools.Output, bool) {
	kve, err := c.kv.Get(ctx, key)
	if err != nil {
		return nil, false
	}
	var e entry
	if json.Unmarshal(kve.Value(), &e) != nil || e.Tool != x.Tool.Name || e.Fingerprint != fp || e.Generation != gen ||
		time.Since(e.Stored) > c.ttl || time.Since(kve.Created()) > c.ttl {
		return nil, false
	}
	return &tools.Output{Content: e.Content, Metadata: e.Metadata, Cached: true}, true
}
