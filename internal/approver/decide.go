package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
)

// Errors of decisions, mapped to HTTP statuses by the API.
var (
	// ErrNotFound (404): no parked call has that id.
	ErrNotFound = errors.New("no parked call with that id")
	// ErrDecided (409): the call is already decided, or this person
	// already approved it.
	ErrDecided = errors.New("call already decided")
	// ErrBadDecision (400): the decision is malformed (no reason, an
	// answer not among the choices, approve on a question, ...).
	ErrBadDecision = errors.New("bad decision")
	// ErrForbidden (403): the agent that made the call tried to decide it.
	ErrForbidden = errors.New("not allowed to decide this call")
	// ErrRefused (422): a worker refused the decision.
	ErrRefused = errors.New("decision refused by a worker")
)

// Input is what a person decides.
type Input struct {
	// Outcome is approve, reject or answer.
	Outcome approval.Outcome
	// Comment is an optional remark.
	Comment string
	// Reason says why a call is rejected (required).
	Reason string
	// Answer answers a clarify question.
	Answer string
	// AlwaysAllow, on approve, asks for an amendment; its ID, agent and
	// tool are filled in, and an empty scope takes the call's default.
	AlwaysAllow *approval.Amendment
	// Arguments, on approve, are the arguments the person changed the call
	// to (approve with changes, edit.go); empty approves it as parked.
	Arguments json.RawMessage
}

// Result says what became of a decision.
type Result struct {
	CallID string `json:"call_id"`
	// Status is the call's status once a worker recorded the decision
	// (pending while more approvals are needed), or "published" when no
	// worker recorded it within the wait.
	Status string `json:"status"`
	// ApprovedBy lists the approvals recorded so far.
	ApprovedBy []string `json:"approved_by,omitempty"`
	// Amendment is the amendment requested, if any.
	Amendment *approval.Amendment `json:"amendment,omitempty"`
	// EditedArgsSHA256 is the hash of the arguments approved with
	// changes, if any.
	EditedArgsSHA256 string `json:"edited_args_sha256,omitempty"`
}

// Decide checks, signs and publishes identity's decision on callID, then
// waits up to DecisionWait for a worker to record it.
func (s *Server) Decide(ctx context.Context, identity, callID string, in Input) (Result, error) {
	p, err := s.get(ctx, callID)
	if err != nil {
		return Result{}, err
	}
	if p.Status.Final() {
		return Result{}, fmt.Errorf("%w: call %s is %s", ErrDecided, callID, p.Status)
	}
	if in.Outcome != approval.Reject && trust.SameName(identity, p.Agent) {
		return Result{}, fmt.Errorf("%w: %q made this call and cannot %s it", ErrForbidden, identity, in.Outcome)
	}
	if in.Outcome == approval.Approve && slices.ContainsFunc(p.ApprovedBy(), func(a string) bool { return trust.SameName(a, identity) }) {
		return Result{}, fmt.Errorf("%w: %q already approved call %s (%d of %d approvals)", ErrDecided, identity, callID, len(p.Approvals), p.Threshold())
	}
	if !s.now().Before(p.ExpiresAt) {
		return Result{}, fmt.Errorf("%w: call %s expired at %s", ErrDecided, callID, p.ExpiresAt.Format(time.RFC3339))
	}
	switch {
	case p.IsClarify() && in.Outcome == approval.Approve:
		return Result{}, fmt.Errorf("%w: call %s asks a question: answer or reject it", ErrBadDecision, callID)
	case !p.IsClarify() && in.Outcome == approval.Answer:
		return Result{}, fmt.Errorf("%w: call %s asks for approval, not an answer", ErrBadDecision, callID)
	case in.Outcome == approval.Answer:
		if err := p.Question.Accepts(in.Answer); err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrBadDecision, err)
		}
	}
	if h := approval.ArgsHash(p.Agent, p.Tool, p.Arguments); h != p.ArgsSHA256 && in.Outcome != approval.Reject {
		return Result{}, fmt.Errorf("%w: the stored arguments of call %s were altered after parking (they hash to %s, not %s)", ErrBadDecision, callID, h, p.ArgsSHA256)
	}
	d := &approval.Decision{CallID: callID, ArgsSHA256: p.ArgsSHA256, Outcome: in.Outcome, Approver: identity, SignerJWT: s.cfg.UserJWT,
		Comment: strings.TrimSpace(in.Comment), Reason: strings.TrimSpace(in.Reason), Answer: in.Answer}
	if a := in.AlwaysAllow; a != nil && in.Outcome == approval.Approve {
		var args map[string]any
		_ = json.Unmarshal(p.Arguments, &args)
		scope := *a
		if scope.CommandPrefix == "" && scope.PathPattern == "" {
			scope = approval.DefaultScope(p.Agent, p.Tool, args, p.Decision.Offending)
		}
		scope.ID, scope.Agent, scope.Tool = nuid.Next(), p.Agent, p.Tool
		if err := scope.ScopedTo(p.Agent, p.Tool, args); err != nil {
			return Result{}, fmt.Errorf("%w: always_allow: %v", ErrBadDecision, err)
		}
		d.AlwaysAllow = &scope
	}
	if err := editDecision(p, d, in.Arguments); err != nil {
		return Result{}, err
	}
	d.DecidedAt = s.now()
	if err := d.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBadDecision, err)
	}
	if err := d.Sign(s.cfg.Key); err != nil {
		return Result{}, err
	}
	ctx, span := s.startDecision(ctx, p, identity, in.Outcome)
	defer span.End()

	// Listen for a refusal of this very decision before publishing it.
	refused := make(chan *parking.RefusalError, 4)
	sub, err := s.nc.Subscribe(approval.RefusedSubject(callID), func(m *nats.Msg) {
		var r parking.Refusal
		if json.Unmarshal(m.Data, &r) == nil && r.Approver == identity && r.PublicKey == s.pub {
			select {
			case refused <- &parking.RefusalError{Code: r.Code, Reason: r.Reason}:
			default:
			}
		}
	})
	if err == nil {
		defer sub.Unsubscribe()
	}
	msg, err := events.NewMessage(events.ApprovalDecisionSubject(callID), "approval-decision-"+nuid.Next(),
		"toolgate://approver/"+s.cfg.Name, events.TypeApprovalDecided, d)
	if err != nil {
		return Result{}, fmt.Errorf("encode decision: %w", err)
	}
	s.obs.t.InjectHeader(ctx, msg.Header)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return Result{}, fmt.Errorf("publish decision: %w", err)
	}
	s.decided(ctx, p, in.Outcome, d.DecidedAt)
	s.log.InfoContext(ctx, "decision published", "call_id", callID, "agent", p.Agent, "tool", p.Tool, "approver", identity, "outcome", in.Outcome)
	return s.await(ctx, d, refused)
}

// await waits for a worker to record d, to refuse it, or for DecisionWait.
func (s *Server) await(ctx context.Context, d *approval.Decision, refused <-chan *parking.RefusalError) (Result, error) {
	res := Result{CallID: d.CallID, Status: "published", Amendment: d.AlwaysAllow, EditedArgsSHA256: d.EditedArgsSHA256}
	deadline := time.NewTimer(s.cfg.DecisionWait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return res, nil
		case <-deadline.C:
			return res, nil
		case why := <-refused:
			if errors.Is(why, parking.ErrAlreadyDecided) || errors.Is(why, parking.ErrDuplicateApprover) {
				return res, fmt.Errorf("%w: %w", ErrDecided, why)
			}
			return res, fmt.Errorf("%w: %w", ErrRefused, why)
		case <-tick.C:
			p, err := s.get(ctx, d.CallID)
			if err != nil {
				continue
			}
			res.ApprovedBy = p.ApprovedBy()
			mine := p.Final != nil && p.Final.Signature == d.Signature
			for _, a := range p.Approvals {
				mine = mine || a.Signature == d.Signature
			}
			switch {
			case mine:
				res.Status = string(p.Status)
				return res, nil
			case p.Status.Final():
				return res, fmt.Errorf("%w: call %s became %s first", ErrDecided, d.CallID, p.Status)
			}
		}
	}
}
