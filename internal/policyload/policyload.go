// Package policyload keeps a worker's policy gate live: it loads the policy
// from a file or from the fleet's shared KV key, applies changes without a
// restart, and keeps the old policy in force when a new one is invalid or,
// for a pushed one, not signed by an admin this install trusts or pushed
// before the one in force. It fails closed at start as well: a refused
// shared policy leaves the last good one of the key's history, or no
// start, never the built-in default.
package policyload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
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
	// Verifier decides whose pushed policies count: a document in KV is
	// applied only when sealed by an admin it trusts (Signed). Nil refuses
	// every pushed policy. A File is not verified: it is the operator's.
	Verifier *trust.Verifier
	// Poll is how often the file is checked; default 1s.
	Poll time.Duration
	// OnChange is told about every apply or refusal.
	OnChange func(Change)
	// Logger receives logs; default slog.Default().
	Logger *slog.Logger
	// Mark is the file keeping this worker's high-water mark: the newest
	// pushed policy it applied, as sealed by the admin who pushed it
	// (revision and push time). It lives outside the key's history, so a
	// rewound history (an older sealed policy written again until the
	// newer one is evicted, or the key deleted) cannot make the worker
	// apply anything older at restart. Empty keeps no mark.
	Mark string

	mu   sync.Mutex
	last []byte
	// pushedAt is when the pushed policy in force was pushed: an older
	// one (a replay of a sealed policy) is refused.
	pushedAt time.Time
}

// ErrNoGoodPolicy: the shared policy was refused and no earlier pushed
// policy in the key's history is good either, so the worker does not
// start (it never falls back to the built-in default).
var ErrNoGoodPolicy = errors.New("no shared policy verifies, and the built-in default is not a fallback")

// Load applies the initial policy: the file (which must be valid), else
// the KV key when it holds a good (valid, admin-sealed) policy, else the
// newest good one of the key's history (the last good policy), else an
// error wrapping ErrNoGoodPolicy. The built-in default applies only when
// no policy was ever pushed: a shared policy that was refused, deleted or
// overwritten never downgrades a worker to it.
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
		if ch, err := l.loadShared(ctx); !errors.Is(err, errNeverPushed) {
			return ch, err
		}
	}
	l.Gate.Set(policy.Default())
	ch := Change{Source: "builtin", Revision: l.Gate.Policy().Revision()}
	l.notify(ch)
	return ch, nil
}

// errNeverPushed: the key has no history at all.
var errNeverPushed = errors.New("no policy was ever pushed")

// loadShared applies, of the policies the key's history holds, the good
// one (admin-sealed and valid) pushed last. The current value is it
// unless it was refused, deleted, or is an older sealed policy stored
// again; then the refusal is logged and the last good one applies. The
// current value is remembered as seen, so that the watch does not refuse
// it again on every re-read. An empty history is errNeverPushed; a
// history with nothing good, ErrNoGoodPolicy.
func (l *Loader) loadShared(ctx context.Context) (Change, error) {
	mark, markAt := l.readMark()
	hist, err := l.KV.History(ctx, Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && len(hist) == 0) {
		if mark != nil {
			l.Logger.Error("shared policy history is empty; the newest pushed policy this worker applied stays", "pushed_at", markAt)
			return l.applyMark(mark)
		}
		return Change{}, errNeverPushed
	}
	if err != nil {
		return Change{}, fmt.Errorf("read shared policy: %w", err)
	}
	var (
		best   []byte
		bestAt time.Time
	)
	for _, e := range hist {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		d, _, err := Open(e.Value(), l.Verifier)
		if err != nil {
			continue
		}
		if _, _, err := policy.Parse(d, "kv:"+Key); err != nil {
			continue
		}
		// The latest push, not the latest write: a replayed old one loses.
		if at := pushedAt(e.Value()); best == nil || !at.Before(bestAt) {
			best, bestAt = e.Value(), at
		}
	}
	cur := hist[len(hist)-1]
	var current []byte
	if cur.Operation() == jetstream.KeyValuePut {
		current = cur.Value()
	}
	if mark != nil && (best == nil || markAt.After(bestAt)) {
		// The history was rewound: what it holds is older than a push
		// this worker applied before.
		l.Logger.Error("shared policy history holds nothing as new as the policy this worker applied last (a rewound history); that one stays",
			"pushed_at", markAt, "newest_in_history", bestAt)
		if cur := hist[len(hist)-1]; cur.Operation() == jetstream.KeyValuePut {
			l.mu.Lock()
			l.last = bytes.Clone(cur.Value())
			l.mu.Unlock()
		}
		return l.applyMark(mark)
	}
	if best == nil {
		ch := Change{Source: "kv:" + Key, Err: errors.New("the shared policy was deleted")}
		if current != nil {
			ch = l.apply(current, "kv:"+Key) // says why it is refused
		}
		return ch, fmt.Errorf("%w: %w", ErrNoGoodPolicy, ch.Err)
	}
	if !bytes.Equal(best, current) {
		why := "the shared policy was deleted"
		if current != nil {
			why = "the shared policy is refused or older than one pushed before"
			if _, _, err := Open(current, l.Verifier); err != nil {
				why = err.Error()
			}
		}
		l.Logger.Error("shared policy refused; the last good pushed policy applies", "why", why, "pushed_at", bestAt)
	}
	ch := l.apply(best, "kv:"+Key)
	if ch.Err != nil { // verified a moment ago
		return ch, fmt.Errorf("%w: %w", ErrNoGoodPolicy, ch.Err)
	}
	if current != nil {
		l.mu.Lock()
		l.last = bytes.Clone(current)
		l.mu.Unlock()
	}
	return ch, nil
}

// pushedAt is when a sealed policy says it was pushed (zero when it does
// not say).
func pushedAt(stored []byte) time.Time {
	var env Signed
	_ = json.Unmarshal(stored, &env)
	return env.PushedAt
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
	var pending []byte // a changed document seen once, not yet settled
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
			l.mu.Lock()
			same := bytes.Equal(data, l.last)
			l.mu.Unlock()
			if same {
				pending = nil
				continue
			}
			// A file being written (the shell's > truncates it first,
			// an editor may write in pieces) reads empty or cut short:
			// a change is applied only once two polls read the same
			// bytes, and an empty document never.
			if pending == nil || !bytes.Equal(data, pending) {
				pending = data
				continue
			}
			pending = nil
			l.applyIfNew(data, "file:"+l.File)
		}
	}
}

// ErrEmptyPolicy: a policy file holds no document (only blanks and
// comments), as it does mid-write; it is refused, never read as the
// empty policy.
var ErrEmptyPolicy = errors.New("the policy file is empty")

// empty reports whether data holds nothing but blank and comment lines.
func empty(data []byte) bool {
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
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

// apply parses data and swaps it in when valid (and, from KV, signed).
// A refusal is the caller's to report (Load returns it, a reload logs
// it), so it is said once.
func (l *Loader) apply(data []byte, source string) Change {
	at := pushedAt(data) // zero for a file
	sealed := data
	l.mu.Lock()
	l.last = bytes.Clone(data)
	l.mu.Unlock()
	if source == "kv:"+Key {
		doc, who, err := Open(data, l.Verifier)
		if err != nil {
			ch := Change{Source: source, Revision: l.Gate.Policy().Revision(), Err: err}
			l.Logger.Error("pushed policy refused; the policy in force stays", "source", source, "err", err)
			l.notify(ch)
			return ch
		}
		if at.Before(l.pushedAt) {
			err := fmt.Errorf("%w: pushed at %s, before the policy in force (%s): a replayed older policy", ErrUnsignedPolicy,
				at.Format(time.RFC3339Nano), l.pushedAt.Format(time.RFC3339Nano))
			ch := Change{Source: source, Revision: l.Gate.Policy().Revision(), Err: err}
			l.Logger.Error("pushed policy refused; the policy in force stays", "source", source, "err", err)
			l.notify(ch)
			return ch
		}
		l.Logger.Info("pushed policy signed", "by", who.String(), "public_key", who.PublicKey)
		data = doc
	}
	p, warns, err := policy.Parse(data, source)
	if err == nil && empty(data) {
		err = fmt.Errorf("%s: %w (a write in progress?)", source, ErrEmptyPolicy)
	}
	if err != nil {
		ch := Change{Source: source, Revision: l.Gate.Policy().Revision(), Err: err}
		l.notify(ch)
		return ch
	}
	l.Gate.Set(p)
	if source == "kv:"+Key {
		l.pushedAt = at
		l.writeMark(sealed, at)
	}
	for _, w := range warns {
		l.Logger.Warn("policy", "source", source, "warning", w.String())
	}
	ch := Change{Source: source, Revision: p.Revision(), Warnings: warns}
	l.Logger.Info("policy applied", "source", source, "revision", p.Revision())
	l.notify(ch)
	return ch
}

// applyMark applies the sealed policy of the high-water mark.
func (l *Loader) applyMark(mark []byte) (Change, error) {
	l.mu.Lock()
	last := l.last
	l.mu.Unlock()
	ch := l.apply(mark, "kv:"+Key)
	if last != nil { // the key's current value stays seen, not re-refused
		l.mu.Lock()
		l.last = last
		l.mu.Unlock()
	}
	if ch.Err != nil {
		return ch, fmt.Errorf("%w: %w", ErrNoGoodPolicy, ch.Err)
	}
	return ch, nil
}

// readMark returns the sealed policy of the high-water mark and when it
// was pushed, or nil when there is no mark or it does not verify (then
// it is ignored, and said).
func (l *Loader) readMark() ([]byte, time.Time) {
	if l.Mark == "" {
		return nil, time.Time{}
	}
	b, err := os.ReadFile(l.Mark)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			l.Logger.Warn("policy high-water mark unreadable; ignored", "file", l.Mark, "err", err)
		}
		return nil, time.Time{}
	}
	if _, _, err := Open(b, l.Verifier); err != nil {
		l.Logger.Warn("policy high-water mark does not verify; ignored", "file", l.Mark, "err", err)
		return nil, time.Time{}
	}
	return b, pushedAt(b)
}

// writeMark records sealed, pushed at at, as the high-water mark when it
// is newer than the one kept (written to a temporary file, then renamed).
func (l *Loader) writeMark(sealed []byte, at time.Time) {
	if l.Mark == "" {
		return
	}
	if old, err := os.ReadFile(l.Mark); err == nil && !pushedAt(old).Before(at) {
		return
	}
	tmp := l.Mark + ".tmp"
	err := os.WriteFile(tmp, sealed, 0o600)
	if err == nil {
		err = os.Rename(tmp, l.Mark)
	}
	if err != nil {
		l.Logger.Error("policy high-water mark not written: a rewound history could apply an older policy at the next start", "file", l.Mark, "err", err)
	}
}

func (l *Loader) notify(ch Change) {
	if l.OnChange != nil {
		l.OnChange(ch)
	}
}

// Push validates data, seals it with signer (admin credentials) and stores
// it as the fleet's shared policy; every worker without --policy applies
// it once it verified the seal. An invalid document is not stored.
func Push(ctx context.Context, kv jetstream.KeyValue, data []byte, source string, signer trust.Signer) (*policy.Policy, []policy.Warning, error) {
	p, warns, err := policy.Parse(data, source)
	if err == nil && empty(data) {
		err = fmt.Errorf("%s: %w", source, ErrEmptyPolicy)
	}
	if err != nil {
		return nil, nil, err
	}
	val, err := Seal(data, source, signer, time.Now())
	if err != nil {
		return nil, nil, err
	}
	if _, err := kv.Put(ctx, Key, val); err != nil {
		return nil, nil, fmt.Errorf("store shared policy: %w", err)
	}
	return p, warns, nil
}

// SignedFormat names the sealed form of a pushed policy.
const SignedFormat = "toolgate.signed-policy.v1"

// ErrUnsignedPolicy: a pushed policy is not sealed, or not by an admin this
// worker trusts.
var ErrUnsignedPolicy = errors.New("pushed policy is not signed by a trusted admin")

// Signed is how a pushed policy is stored under Key: the document and who
// pushed it, sealed by the pusher's key.
type Signed struct {
	// Format is SignedFormat.
	Format string `json:"format"`
	// Source names where the document came from (the pushed file).
	Source string `json:"source,omitempty"`
	// Document is the policy document (YAML or JSON) as pushed.
	Document string `json:"document"`
	// PushedAt is when it was pushed.
	PushedAt time.Time `json:"pushed_at"`
	// Seal is the pusher's signature over SigningBytes.
	Seal *trust.Seal `json:"seal,omitempty"`
}

// SigningBytes is what the seal covers: the envelope without its seal.
func (s Signed) SigningBytes() []byte {
	s.Seal = nil
	b, _ := json.Marshal(s)
	return b
}

// Seal wraps document in a Signed envelope sealed by signer.
func Seal(document []byte, source string, signer trust.Signer, now time.Time) ([]byte, error) {
	env := Signed{Format: SignedFormat, Source: source, Document: string(document), PushedAt: now.UTC()}
	seal, err := signer.Sign(env.SigningBytes())
	if err != nil {
		return nil, fmt.Errorf("sign policy: %w", err)
	}
	env.Seal = &seal
	return json.Marshal(env)
}

// Open returns the document of a stored policy when it is sealed by an
// admin v trusts, and who that is. Anything else (a bare document, a seal
// by another role, key or account) is ErrUnsignedPolicy.
func Open(stored []byte, v *trust.Verifier) ([]byte, trust.Identity, error) {
	var env Signed
	if err := json.Unmarshal(stored, &env); err != nil || env.Format != SignedFormat {
		return nil, trust.Identity{}, fmt.Errorf("%w: the stored value is not a sealed policy (%s)", ErrUnsignedPolicy, SignedFormat)
	}
	who, err := v.Check(env.Seal, env.SigningBytes(), trust.RoleAdmin)
	if err != nil {
		return nil, who, fmt.Errorf("%w: %w", ErrUnsignedPolicy, err)
	}
	return []byte(env.Document), who, nil
}
