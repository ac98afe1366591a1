package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// JudgeEdit is the parking.EditJudge of pipe: the edited call goes through
// the pipeline judge-only, as approved, so it is resolved, validated
// against the tool's schema and judged by the policy in force, and nothing
// runs. An ask passes (the approval answers it) unless it needs more
// people than the call's threshold; a deny or invalid arguments refuse
// the edit with what is wrong.
func JudgeEdit(pipe *tools.Pipeline) parking.EditJudge {
	return func(ctx context.Context, p *parking.Parked, args json.RawMessage) error {
		c := &tools.Call{ID: p.CallID, Agent: p.Agent, SessionID: p.SessionID, Name: p.Tool, Arguments: args,
			Approved: true, Approvals: p.Threshold(), JudgeOnly: true}
		_, err := pipe.Handle(ctx, c)
		var pe *tools.PolicyError
		var ae *tools.ArgumentError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &pe):
			return fmt.Errorf("the policy refuses the edited call: %w", err)
		case errors.As(err, &ae):
			return fmt.Errorf("the edited arguments do not fit the tool's schema: %w", err)
		}
		return fmt.Errorf("the edited call cannot be judged: %w", err)
	}
}

// withEdits is the call as it resumes: with the arguments people edited it
// to, when they approved it with changes; appr, its audit, then keeps the
// hash of the arguments it was parked with too.
func withEdits(in *events.Call, p *parking.Parked, o parking.Outcome, appr *events.ApprovalAudit) *events.Call {
	if len(o.EditedArguments) == 0 {
		return in
	}
	e := *in
	e.Data.Arguments = o.EditedArguments
	if appr != nil {
		appr.OriginalArgsSHA256 = ArgsSHA256(p.Arguments)
	}
	return &e
}
