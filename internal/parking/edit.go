package parking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/pkg/approval"
)

// Approve with changes: a person may approve a call with edited arguments.
// The decision signs both the parked call's hash and the edited
// arguments' hash; a worker hashes the edited arguments again, has them
// judged (validated against the tool's schema and by the policy in force,
// EditJudge) before recording the approval, and checks all of it again
// before the call resumes with them.

// ErrEditRefused: the edited arguments are invalid for the tool, the
// policy denies them, or they differ from what another approval of the
// same call changed it to.
var ErrEditRefused = errors.New("edited arguments refused")

// EditJudge judges the arguments a person edited a parked call to, as the
// call would run with them after the approval: validated against the
// tool's schema and judged by the policy in force (an ask passes, as the
// approval answers it; a deny fails). A nil EditJudge refuses every edit.
type EditJudge func(ctx context.Context, p *Parked, args json.RawMessage) error

// fitsEdit judges the changes an approval d makes to the parked call p:
// the edited arguments hash to the signed hash, a question cannot be
// edited, every approval of the call agrees on the arguments that run,
// and the judge accepts them.
func (m *Manager) fitsEdit(ctx context.Context, p *Parked, d *approval.Decision) error {
	refused := func(err error, format string, a ...any) error {
		return fmt.Errorf("%w: %w: %s", ErrRefused, err, fmt.Sprintf(format, a...))
	}
	if d.Outcome == approval.Approve {
		for _, a := range p.Approvals {
			if a.EffectiveArgsSHA256() != d.EffectiveArgsSHA256() {
				return refused(ErrEditRefused, "%q approved call %s with arguments hashing to %s; this approval is for %s: every approval must be for the same arguments",
					a.Approver, p.CallID, a.EffectiveArgsSHA256(), d.EffectiveArgsSHA256())
			}
		}
	}
	if !d.Edited() {
		return nil
	}
	if err := d.CheckEdit(p.Agent, p.Tool); err != nil {
		return refused(ErrEditRefused, "%v", err)
	}
	if p.IsClarify() {
		return refused(ErrWrongOutcome, "call %s asks a question: its arguments cannot be edited", p.CallID)
	}
	if p.Meta["judge_only"] == "true" {
		return refused(ErrEditRefused, "call %s is judge-only: the caller runs its own arguments, so they cannot be edited", p.CallID)
	}
	if m.opts.EditJudge == nil {
		return refused(ErrEditRefused, "this worker cannot judge edited arguments")
	}
	if err := m.opts.EditJudge(ctx, p, d.EditedArguments); err != nil {
		return refused(ErrEditRefused, "%v", err)
	}
	return nil
}

// verifyEdits checks the approvals of a decided record again: each edit
// hashes to its signed hash and all approvals agree on the arguments that
// run. It returns the edited arguments, nil when the call runs as parked.
func verifyEdits(p *Parked) (json.RawMessage, string, error) {
	var args json.RawMessage
	var hash string
	for i := range p.Approvals {
		a := &p.Approvals[i]
		if err := a.CheckEdit(p.Agent, p.Tool); err != nil {
			return nil, "", fmt.Errorf("%w: %w", ErrTampered, err)
		}
		if i > 0 && a.EffectiveArgsSHA256() != p.Approvals[0].EffectiveArgsSHA256() {
			return nil, "", fmt.Errorf("%w: the approvals are for different arguments", ErrTampered)
		}
		if a.Edited() {
			if p.IsClarify() || p.Meta["judge_only"] == "true" {
				return nil, "", fmt.Errorf("%w: an approval changes the arguments of a call whose arguments cannot be changed", ErrTampered)
			}
			c, err := approval.EditArgs(a.EditedArguments)
			if err != nil {
				return nil, "", fmt.Errorf("%w: %w", ErrTampered, err)
			}
			args, hash = c, a.EditedArgsSHA256
		}
	}
	return args, hash, nil
}
