package approver

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/pkg/approval"
)

// Approve with changes: a person may change a parked call's arguments
// before approving it (the page's editor, the API's "arguments", Slack's
// "Approve with changes", `toolctl approvals approve --args`). The
// approver signs the edited arguments and their hash with the decision;
// a worker validates and judges them again before the approval counts.

// Slack action and block ids of approve with changes: the message carries
// an input block holding the arguments and a button that approves with
// whatever the input holds when it is clicked (Slack sends the message's
// input values in the block_actions payload's state).
const (
	SlackApproveEdit = "toolgate_approve_edit"
	SlackArgsBlock   = "toolgate_args"
	SlackArgsInput   = "toolgate_args_input"
)

// slackMaxInput is the most a Slack plain_text_input holds.
const slackMaxInput = 3000

// editDecision makes d an approval of p with the arguments args, when
// args is set: only an approval of a call that is not a question, without
// an amendment, with a JSON object for arguments.
func editDecision(p *parking.Parked, d *approval.Decision, args json.RawMessage) error {
	a := bytes.TrimSpace(args)
	if len(a) == 0 || string(a) == "null" {
		return nil
	}
	switch {
	case d.Outcome != approval.Approve:
		return fmt.Errorf("%w: arguments: only an approval can change them", ErrBadDecision)
	case p.IsClarify():
		return fmt.Errorf("%w: arguments: call %s asks a question; its arguments cannot be changed", ErrBadDecision, p.CallID)
	case d.AlwaysAllow != nil:
		return fmt.Errorf("%w: arguments: approve with changes cannot also always allow", ErrBadDecision)
	case p.Meta["judge_only"] == "true":
		return fmt.Errorf("%w: arguments: call %s is judge-only; the caller runs its own arguments", ErrBadDecision, p.CallID)
	}
	if err := d.Edit(p.Agent, p.Tool, a); err != nil {
		return fmt.Errorf("%w: arguments: %v", ErrBadDecision, err)
	}
	return nil
}

// slackState is the state of a Slack block_actions payload: the values of
// the message's input blocks, by block id and action id.
type slackState struct {
	Values map[string]map[string]struct {
		Type  string  `json:"type"`
		Value *string `json:"value"`
	} `json:"values"`
}

// slackArgs is the arguments input's value in a block_actions state.
func slackArgs(st slackState) (json.RawMessage, error) {
	v, ok := st.Values[SlackArgsBlock][SlackArgsInput]
	if !ok || v.Value == nil {
		return nil, fmt.Errorf("%w: the message has no arguments input", ErrBadDecision)
	}
	return json.RawMessage(*v.Value), nil
}

// slackArgsBlocks are the blocks of approve with changes: an input holding
// the arguments as JSON (pretty, so a person can edit them) and nothing
// when they do not fit in one.
func slackArgsBlocks(req approval.Request) []any {
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, req.Arguments, "", "  "); err != nil || pretty.Len() > slackMaxInput {
		return nil
	}
	return []any{map[string]any{
		"type": "input", "block_id": SlackArgsBlock, "optional": true,
		"label": map[string]any{"type": "plain_text", "text": "Arguments (edit, then Approve with changes)"},
		"element": map[string]any{"type": "plain_text_input", "action_id": SlackArgsInput, "multiline": true,
			"initial_value": pretty.String(), "max_length": slackMaxInput},
	}}
}
