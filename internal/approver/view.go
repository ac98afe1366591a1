package approver

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/pkg/approval"
)

// Snapshot is what the page shows: pending calls, oldest first, and the
// recent history, newest first.
type Snapshot struct {
	ServerTime time.Time `json:"server_time"`
	Identity   string    `json:"identity"`
	Pending    []View    `json:"pending"`
	History    []View    `json:"history"`
}

func (s *Server) snapshot(identity string) Snapshot {
	s.mu.Lock()
	var pending, done []*parking.Parked
	for _, p := range s.calls {
		if p.Status == approval.Pending {
			pending = append(pending, p)
		} else {
			done = append(done, p)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(pending, func(a, b *parking.Parked) int { return a.ParkedAt.Compare(b.ParkedAt) })
	slices.SortFunc(done, func(a, b *parking.Parked) int { return decidedAt(b).Compare(decidedAt(a)) })
	snap := Snapshot{ServerTime: s.now().UTC(), Identity: identity, Pending: []View{}, History: []View{}}
	for _, p := range pending {
		snap.Pending = append(snap.Pending, viewOf(p))
	}
	for _, p := range done[:min(len(done), s.cfg.History)] {
		snap.History = append(snap.History, viewOf(p))
	}
	return snap
}

func decidedAt(p *parking.Parked) time.Time {
	if p.Outcome != nil {
		return p.Outcome.DecidedAt
	}
	return p.ParkedAt
}

// View is a parked call as the API and the page show it.
type View struct {
	CallID     string          `json:"call_id"`
	Agent      string          `json:"agent"`
	SessionID  string          `json:"session_id,omitempty"`
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
	Rule       string          `json:"rule,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Offending  string          `json:"offending,omitempty"`
	ArgsSHA256 string          `json:"args_sha256"`
	Diff       string          `json:"diff,omitempty"`
	Question   *QuestionView   `json:"question,omitempty"`
	// Approvers is how many distinct people must approve.
	Approvers int `json:"approvers"`
	// ApprovedBy lists who approved so far.
	ApprovedBy  []string  `json:"approved_by,omitempty"`
	Status      string    `json:"status"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Outcome is set once the call is decided.
	Outcome *parking.Outcome `json:"outcome,omitempty"`
	// Scope is the default "always allow" scope for this call: the
	// narrowest, Scopes[0].
	Scope *approval.Amendment `json:"always_allow_scope,omitempty"`
	// Scopes are the "always allow" scopes a person may choose, narrowest
	// first; a wider one is an explicit choice.
	Scopes []approval.Amendment `json:"always_allow_scopes,omitempty"`
}

// QuestionView is a clarify question as shown.
type QuestionView struct {
	Text          string   `json:"question"`
	Choices       []string `json:"choices,omitempty"`
	DefaultAnswer *string  `json:"default_answer,omitempty"`
}

func viewOf(p *parking.Parked) View {
	v := View{CallID: p.CallID, Agent: p.Agent, SessionID: p.SessionID, Tool: p.Tool, Arguments: p.Arguments,
		Rule: p.Decision.Rule, Reason: p.Decision.Reason, Offending: p.Decision.Offending, ArgsSHA256: p.ArgsSHA256,
		Diff: p.Diff, Approvers: p.Threshold(), ApprovedBy: p.ApprovedBy(), Status: string(p.Status),
		RequestedAt: p.ParkedAt, ExpiresAt: p.ExpiresAt, Outcome: p.Outcome}
	if q := p.Question; q != nil {
		v.Question = &QuestionView{Text: q.Text, Choices: q.Choices, DefaultAnswer: q.DefaultAnswer}
	} else if p.Status == approval.Pending {
		var args map[string]any
		_ = json.Unmarshal(p.Arguments, &args)
		v.Scopes = approval.Scopes(p.Agent, p.Tool, args, p.Decision.Offending)
		v.Scope = &v.Scopes[0]
		if v.Diff == "" {
			v.Diff = approval.ArgsDiff(p.Tool, args)
		}
	}
	return v
}
