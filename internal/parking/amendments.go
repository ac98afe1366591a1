package parking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// ErrNoAmendment: no amendment has that id.
var ErrNoAmendment = errors.New("no amendment with that id")

// ListAmendments returns the amendments stored in the policy bucket kv,
// oldest first, including expired ones (see Amendment.Active).
func ListAmendments(ctx context.Context, kv jetstream.KeyValue) ([]approval.Amendment, error) {
	lister, err := kv.ListKeysFiltered(ctx, approval.AmendmentKeyPrefix+">")
	if err != nil {
		return nil, fmt.Errorf("list amendments: %w", err)
	}
	defer lister.Stop()
	var out []approval.Amendment
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list amendments: %s: %w", key, err)
		}
		a, err := decodeAmendment(e)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	sortAmendments(out)
	return out, nil
}

// RevokeAmendment deletes the amendment id; ErrNoAmendment when there is
// none.
func RevokeAmendment(ctx context.Context, kv jetstream.KeyValue, id string) error {
	key := approval.AmendmentKeyPrefix + id
	if strings.ContainsAny(id, ".*> ") || id == "" {
		return fmt.Errorf("%w: %q", ErrNoAmendment, id)
	}
	if _, err := kv.Get(ctx, key); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%w: %q", ErrNoAmendment, id)
		}
		return fmt.Errorf("revoke amendment %s: %w", id, err)
	}
	if err := kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("revoke amendment %s: %w", id, err)
	}
	return nil
}

// amendmentsResync is how often WatchAmendments re-reads the bucket in
// case its watch went quiet (as after a server restart), so a revocation
// is never missed for long.
var amendmentsResync = 10 * time.Second

// AmendmentVerifier decides whether a stored amendment may take effect;
// *Manager is one (Manager.VerifyAmendment).
type AmendmentVerifier interface {
	VerifyAmendment(ctx context.Context, a approval.Amendment) error
}

// WatchAmendments calls fn with the active amendments in the policy bucket
// kv that verify passes, once they are loaded and again after every change
// (and whenever one expires), until ctx ends. Calls to fn do not overlap.
// A record that does not decode is logged and left out; so is one verify
// refuses (a nil verify refuses every amendment).
func WatchAmendments(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger, verify AmendmentVerifier, fn func([]approval.Amendment)) error {
	if log == nil {
		log = slog.Default()
	}
	var mu sync.Mutex
	all := map[string]approval.Amendment{}
	publish := func() {
		now := time.Now()
		var active []approval.Amendment
		for _, a := range all {
			if !a.Active(now) {
				continue
			}
			if verify == nil {
				log.Error("amendment refused: nothing to verify it with", "amendment", a.ID)
				continue
			}
			if err := verify.VerifyAmendment(ctx, a); err != nil {
				continue // the verifier says why, once
			}
			active = append(active, a)
		}
		sortAmendments(active)
		fn(active)
	}
	for ctx.Err() == nil {
		w, err := kv.Watch(ctx, approval.AmendmentKeyPrefix+">")
		if err != nil {
			log.Debug("watch amendments", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		tick := time.NewTicker(time.Second)
		resync := time.NewTicker(amendmentsResync)
		loaded := false
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-resync.C:
				list, err := ListAmendments(ctx, kv)
				if err != nil {
					continue
				}
				fresh := map[string]approval.Amendment{}
				for _, a := range list {
					fresh[a.ID] = a
				}
				mu.Lock()
				if loaded && !sameAmendments(all, fresh) {
					log.Warn("amendments watch missed changes; reloaded them from the bucket", "amendments", len(fresh))
					all = fresh
					publish()
				}
				mu.Unlock()
			case <-tick.C:
				mu.Lock()
				expiring := false
				for _, a := range all {
					if a.ExpiresAt != nil && !a.Active(time.Now()) {
						delete(all, a.ID)
						expiring = true
					}
				}
				if expiring && loaded {
					publish()
				}
				mu.Unlock()
			case e, ok := <-w.Updates():
				if !ok {
					break loop
				}
				mu.Lock()
				if e == nil {
					loaded = true
					publish()
					mu.Unlock()
					continue
				}
				id := strings.TrimPrefix(e.Key(), approval.AmendmentKeyPrefix)
				if e.Operation() != jetstream.KeyValuePut {
					delete(all, id)
				} else if a, err := decodeAmendment(e); err != nil {
					log.Error("unreadable amendment", "key", e.Key(), "err", err)
					delete(all, id)
				} else {
					all[id] = a
				}
				if loaded {
					publish()
				}
				mu.Unlock()
			}
		}
		tick.Stop()
		resync.Stop()
		_ = w.Stop()
	}
	return nil
}

func sameAmendments(a, b map[string]approval.Amendment) bool {
	if len(a) != len(b) {
		return false
	}
	for id, x := range a {
		y, ok := b[id]
		if !ok {
			return false
		}
		xj, _ := json.Marshal(x)
		yj, _ := json.Marshal(y)
		if string(xj) != string(yj) {
			return false
		}
	}
	return true
}

func decodeAmendment(e jetstream.KeyValueEntry) (approval.Amendment, error) {
	var a approval.Amendment
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return a, fmt.Errorf("amendment %s: %w", e.Key(), err)
	}
	a.ID = strings.TrimPrefix(e.Key(), approval.AmendmentKeyPrefix)
	return a, nil
}

func sortAmendments(as []approval.Amendment) {
	slices.SortFunc(as, func(a, b approval.Amendment) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// RegisterApproverKey records an approver service's public key in the
// approvals bucket kv, where workers with no configured trusted keys find
// it. Registering a key again keeps its first registration.
func RegisterApproverKey(ctx context.Context, kv jetstream.KeyValue, k approval.ApproverKey) error {
	if k.RegisteredAt.IsZero() {
		k.RegisteredAt = time.Now().UTC()
	}
	if _, err := approval.NewKeySet(k.PublicKey); err != nil {
		return fmt.Errorf("register approver key: %w", err)
	}
	val, _ := json.Marshal(k)
	if _, err := kv.Create(ctx, approverKeyPrefix+k.PublicKey, val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("register approver key: %w", err)
	}
	return nil
}

// PolicyAmendments converts stored amendments to the gate's form
// (policy.Gate.SetAmendments).
func PolicyAmendments(as []approval.Amendment) []policy.Amendment {
	out := make([]policy.Amendment, 0, len(as))
	for _, a := range as {
		out = append(out, policy.Amendment{ID: a.ID, Agent: a.Agent, Tool: a.Tool,
			CommandPrefix: strings.Fields(a.CommandPrefix), PathPattern: a.PathPattern,
			CreatedBy: strings.Join(a.CreatedBy, ", "), Reason: a.Comment, CreatedAt: a.CreatedAt})
	}
	return out
}

// WatchPolicyAmendments is WatchAmendments handing fn the gate's form, so a
// worker can pass gate.SetAmendments directly.
func WatchPolicyAmendments(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger, verify AmendmentVerifier, fn func([]policy.Amendment)) error {
	return WatchAmendments(ctx, kv, log, verify, func(as []approval.Amendment) { fn(PolicyAmendments(as)) })
}

// ErrUnsignedAmendment: an amendment carries no approval that verifies.
var ErrUnsignedAmendment = errors.New("amendment is not backed by a signed approval")

// VerifyAmendment lets an amendment take effect only when it carries the
// signed approval that asked for it (Grant): a signature that verifies, by
// a key that may approve (as for decisions), an approval of the call the
// amendment names, whose always_allow is exactly the amendment's scope.
// The first refusal of each stored amendment is logged and published as a
// dev.toolgate.policy.rejected.v1 event.
func (m *Manager) VerifyAmendment(ctx context.Context, a approval.Amendment) error {
	err := m.verifyAmendment(ctx, &a)
	m.mu.Lock()
	if m.amendRefused == nil {
		m.amendRefused = map[string]string{}
	}
	key := a.ID + "\x00" + a.CreatedAt.String()
	_, told := m.amendRefused[key]
	if err == nil {
		delete(m.amendRefused, key)
	} else {
		m.amendRefused[key] = err.Error()
	}
	m.mu.Unlock()
	if err != nil && !told {
		m.log.Error("amendment refused; it does not take effect", "amendment", a.ID, "agent", a.Agent, "tool", a.Tool, "err", err)
		msg, merr := events.NewMessage(events.PolicyChangeSubject, "amendment-refused-"+a.ID+"-"+strconv.FormatInt(m.now().UnixNano(), 10),
			"toolgate://worker/"+m.opts.Name, events.TypePolicyRejected,
			events.PolicyChangeData{Source: "kv:" + approval.AmendmentKeyPrefix + a.ID, Errors: []string{err.Error()}, Worker: m.opts.Name})
		if merr == nil {
			_, merr = m.js.PublishMsg(ctx, msg)
		}
		if merr != nil {
			m.log.Warn("publish amendment refusal", "amendment", a.ID, "err", merr)
		}
	}
	return err
}

func (m *Manager) verifyAmendment(ctx context.Context, a *approval.Amendment) error {
	if err := a.Validate(); err != nil {
		return err
	}
	g := a.Grant
	if g == nil {
		return fmt.Errorf("%w: %s carries no approval", ErrUnsignedAmendment, a.ID)
	}
	if err := g.VerifySignature(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsignedAmendment, err)
	}
	signer, err := m.Signer(ctx, g)
	if err != nil {
		return fmt.Errorf("%w: %w: %w", ErrUnsignedAmendment, approval.ErrUntrustedKey, err)
	}
	switch {
	case g.Outcome != approval.Approve || g.AlwaysAllow == nil:
		return fmt.Errorf("%w: the signed decision is not an approval asking for it", ErrUnsignedAmendment)
	case g.CallID != a.CallID:
		return fmt.Errorf("%w: approval of call %q, amendment of call %q", ErrUnsignedAmendment, g.CallID, a.CallID)
	case !g.AlwaysAllow.SameScope(a):
		return fmt.Errorf("%w: the amendment's scope is not the one %q signed", ErrUnsignedAmendment, g.Approver)
	}
	return selfApproval(a.Agent, g, signer)
}
