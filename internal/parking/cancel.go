package parking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/approval"
)

// Withdraw cancels the pending parked call callID of agent: its record
// becomes final with status cancelled (compare-and-set, so a decision
// racing it either lands first or is refused as too late), approvers no
// longer see it pending, and the sweep of any worker resumes it, which
// answers it cancelled. It returns approval.Cancelled when it withdrew the
// call, else the final status the call already had; ErrNotFound when no
// call of agent is parked under that id.
func (m *Manager) Withdraw(ctx context.Context, callID, agent, reason string) (approval.Status, error) {
	for attempt := 0; attempt < 50; attempt++ {
		p, rev, err := m.get(ctx, agent, callID)
		if err != nil {
			return "", err
		}
		if p.Agent != agent {
			return "", fmt.Errorf("%w: %s", ErrNotFound, callID)
		}
		if p.Status.Final() {
			return p.Status, nil
		}
		now := m.now().UTC()
		p.Status = approval.Cancelled
		p.Outcome = &Outcome{Status: approval.Cancelled, Reason: reason, DecidedAt: now}
		p.Claim = nil // the next sweep, on any worker, resumes it
		val, err := json.Marshal(p)
		if err != nil {
			return "", fmt.Errorf("withdraw %s: %w", callID, err)
		}
		if _, err := m.kv.Update(ctx, CallKey(agent, callID), val, rev); err != nil {
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue // changed meanwhile: look again
			}
			return "", fmt.Errorf("withdraw %s: %w", callID, err)
		}
		m.log.Info("parked call withdrawn: cancelled by its agent", "call_id", callID, "agent", agent)
		return approval.Cancelled, nil
	}
	return "", fmt.Errorf("withdraw %s: the record kept changing", callID)
}
