// Package policyload keeps a worker's policy gate live: it loads the policy
// from a file or from the fleet's shared KV key, applies changes without a
// restart, and keeps the old policy in force when a new one is invalid.
package policyload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/policy"
)

// Key is the key of the shared policy document in the policy bucket.
const Key = "policy"

// Change reports one attempt to apply a policy.
type Change struct {
	// Source is "file:<path>", "kv:policy" or "builtin".
	Source string
	// Revision of the policy now in force (the new one when applied).
	Revision string
	// Err is set when the new document was refused; the old policy stays.
	Err error
	// Warnings are the linter's warnings for an applied document.
	Warnings []policy.Warning
}

// Loader feeds a gate from a file (when File is set) or from the shared KV
// key (otherwise). A worker started with --policy FILE follows that file and
// ignores pushes; without it, it follows `toolctl policy push`.
type Loader struct {
	// Gate is the gate whose policy is replaced.
	Gate *policy.Gate
	// File is the policy file to follow; empty follows the KV key.
	File string
	// KV is the policy bucket; required when File is empty.
	KV jetstream.KeyValue
	// Poll is how often the file is checked; default 1s.
	Poll time.Duration
	// OnChange is told about every apply or refusal.
	OnChange func(Change)
	// Logger receives logs; default slog.Default().
	Logger *slog.Logger

	mu   sync.Mutex
	last []byte
}

// Load applies the initial policy: the file (which must be valid), else the
// KV key when present and valid, else the built-in default.
func (l *Loader) Load(ctx context.Context) (Change, error) {
	if l.Logger == nil {
		l.Logger = slog.Default()
	}
	if l.File != "" {
		data, err := os.ReadFile(l.File)
		if err != nil {
			return Change{}, fmt.Errorf("--policy: %w", err)
		}
		ch := l.apply(data, "file:"+l.File)
		if ch.Err != nil {
			return ch, ch.Err
		}
		return ch, nil
	}
	if l.KV != nil {
		e, err := l.KV.Get(ctx, Key)
		switch {
		case err == nil:
			ch := l.apply(e.Value(), "kv:"+Key)
			if ch.Err == nil {
				return ch, nil
			}
			l.Logger.Error("shared policy is invalid; using the built-in default", "err", ch.Err)
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return Change{}, fmt.Errorf("read shared policy: %w", err)
		}
	}
	l.Gate.Set(policy.Default())
	ch := Change{Source: "builtin", Revision: l.Gate.Policy().Revision()}
	l.notify(ch)
	return ch, nil
}

// Watch applies changes until ctx ends: it polls the file, or watches the
// KV key.
func (l *Loader) Watch(ctx context.Context) {
	if l.File != "" {
		l.watchFile(ctx)
		return
	}
	if l.KV != nil {
		l.watchKV(ctx)
	}
}

func (l *Loader) watchFile(ctx context.Context) {
	poll := l.Poll
	if poll <= 0 {
		poll = time.Second
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	unreadable := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			data, err := os.ReadFile(l.File)
			if err != nil {
				if !unreadable { // say it once, not every poll
					l.Logger.Warn("policy file unreadable; keeping the policy in force", "file", l.File, "err", err)
				}
				unreadable = true
				continue
			}
			unreadable = false
			l.applyIfNew(data, "file:"+l.File)
		}
	}
}

// watchKV follows the KV key. A watch can go quiet after the server
// restarts without closing, so the key is also read again every Poll×10.
func (l *Loader) watchKV(ctx context.Context) {
	reread := l.Poll * 10
	if reread <= 0 {
		reread = 10 * time.Second
	}
	for ctx.Err() == nil {
		w, err := l.KV.Watch(ctx, Key, jetstream.UpdatesOnly())
		if err != nil {
			l.Logger.Warn("watch shared policy", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		t := time.NewTicker(reread)
	watch:
		for {
			select {
			case <-ctx.Done():
				break watch
			case e, ok := <-w.Updates():
				if !ok {
					break watch
				}
				if e == nil {
					continue
				}
				if e.Operation() != jetstream.KeyValuePut {
					l.Logger.Warn("shared policy deleted; keeping the policy in force")
					continue
				}
				l.applyIfNew(e.Value(), "kv:"+Key)
			case <-t.C:
				if e, err := l.KV.Get(ctx, Key); err == nil {
					l.applyIfNew(e.Value(), "kv:"+Key)
				}
			}
		}
		t.Stop()
		_ = w.Stop()
	}
}

func (l *Loader) applyIfNew(data []byte, source string) {
	l.mu.Lock()
	same := bytes.Equal(data, l.last)
	l.mu.Unlock()
	if !same {
		if ch := l.apply(data, source); ch.Err != nil {
			l.Logger.Error("new policy refused; the policy in force stays", "source", source, "err", ch.Err)
		}
	}
}

// apply parses data and swaps it in when valid. A refusal is the
// caller's to report (Load returns it, a reload logs it), so it is said
// once.
func (l *Loader) apply(data []byte, source string) Change {
	l.mu.Lock()
	l.last = bytes.Clone(data)
	l.mu.Unlock()
	p, warns, err := policy.Parse(data, source)
	if err != nil {
		ch := Change{Source: source, Revision: l.Gate.Policy().Revision(), Err: err}
		l.notify(ch)
		return ch
	}
	l.Gate.Set(p)
	for _, w := range warns {
		l.Logger.Warn("policy", "source", source, "warning", w.String())
	}
	ch := Change{Source: source, Revision: p.Revision(), Warnings: warns}
	l.Logger.Info("policy applied", "source", source, "revision", p.Revision())
	l.notify(ch)
	return ch
}

func (l *Loader) notify(ch Change) {
	if l.OnChange != nil {
		l.OnChange(ch)
	}
}

// Push validates data and stores it as the fleet's shared policy; every
// worker without --policy applies it. An invalid document is not stored.
func Push(ctx context.Context, kv jetstream.KeyValue, data []byte, source string) (*policy.Policy, []policy.Warning, error) {
	p, warns, err := policy.Parse(data, source)
	if err != nil {
		return nil, nil, err
	}
	if _, err := kv.Put(ctx, Key, data); err != nil {
		return nil, nil, fmt.Errorf("store shared policy: %w", err)
	}
	return p, warns, nil
}
