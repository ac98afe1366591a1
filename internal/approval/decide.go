package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// Reasons a decision is refused, for errors.Is.
var (
	// ErrRefused wraps every reason a worker refuses a decision.
	ErrRefused = errors.New("decision refused")
	// ErrHashMismatch: the decision was made for other arguments.
	ErrHashMismatch = errors.New("decision is for other arguments")
	// ErrSelfApproval: the agent that made the call tried to approve it.
	ErrSelfApproval = errors.New("an agent cannot approve its own call")
	// ErrAlreadyDecided: the call's outcome is already final.
	ErrAlreadyDecided = errors.New("call already decided")
	// ErrDuplicateApprover: this person already approved the call.
	ErrDuplicateApprover = errors.New("approver already approved this call")
	// ErrLate: the decision arrived after the deadline.
	ErrLate = errors.New("decision arrived after the deadline")
	// ErrWrongOutcome: approve/reject for a question, or answer for an approval.
	ErrWrongOutcome = errors.New("outcome does not fit the parked call")
)

// refusal is the data of a dev.toolgate.approval.refused.v1 event.
type refusal struct {
	CallID    string           `json:"call_id"`
	Approver  string           `json:"approver,omitempty"`
	PublicKey string           `json:"public_key,omitempty"`
	Outcome   approval.Outcome `json:"outcome,omitempty"`
	Reason    string           `json:"reason"`
	Worker    string           `json:"worker"`
	Time      time.Time        `json:"time"`
}

// resolution is the data of a dev.toolgate.approval.resolved.v1 event.
type resolution struct {
	CallID  string  `json:"call_id"`
	Agent   string  `json:"agent"`
	Tool    string  `json:"tool"`
	Outcome Outcome `json:"outcome"`
	Worker  string  `json:"worker"`
}

// decodeDecision reads a decision from a CloudEvent in any content mode.
func decodeDecision(msg jetstream.Msg) (*approval.Decision, error) {
	var d approval.Decision
	if _, err := events.DecodeData(msg.Headers(), msg.Data(), &d); err != nil {
		return nil, fmt.Errorf("decision: %w", err)
	}
	return &d, nil
}

func (m *Manager) handleDecision(ctx context.Context, msg jetstream.Msg, resume ResumeFunc) {
	subjID := strings.TrimPrefix(msg.Subject(), strings.TrimSuffix(approval.SubjectDecisions, ">"))
	d, err := decodeDecision(msg)
	if err != nil {
		m.refuse(ctx, &approval.Decision{CallID: subjID}, fmt.Errorf("%w: %v", ErrRefused, err))
		_ = msg.Term()
		return
	}
	if err := m.check(ctx, subjID, d); err != nil {
		m.refuse(ctx, d, err)
		_ = msg.Term()
		return
	}
	for attempt := 0; ; attempt++ {
		p, rev, err := m.get(ctx, d.CallID)
		if errors.Is(err, ErrNotFound) {
			m.refuse(ctx, d, fmt.Errorf("%w: %w", ErrRefused, err))
			_ = msg.Term()
			return
		}
		if err != nil {
			m.log.Warn("load parked call", "call_id", d.CallID, "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		if err := m.fits(p, d); err != nil {
			if errors.Is(err, ErrAlreadyDecided) || errors.Is(err, ErrDuplicateApprover) {
				m.log.Info("decision changes nothing", "call_id", d.CallID, "approver", d.Approver, "reason", err)
			}
			m.refuse(ctx, d, err)
			_ = msg.Ack()
			return
		}
		final := m.apply(p, d)
		val, err := json.Marshal(p)
		if err != nil {
			m.log.Error("encode parked call", "call_id", p.CallID, "err", err)
			_ = msg.Term()
			return
		}
		newRev, err := m.kv.Update(ctx, CallKey(p.CallID), val, rev)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) && attempt < 50 {
				continue // someone else changed it first: judge again on the new record
			}
			m.log.Warn("record decision", "call_id", p.CallID, "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		m.log.Info("decision recorded", "call_id", p.CallID, "agent", p.Agent, "tool", p.Tool,
			"approver", d.Approver, "outcome", d.Outcome, "status", p.Status,
			"approvals", len(p.Approvals), "threshold", p.Threshold())
		_ = msg.Ack()
		if final {
			m.startResume(ctx, p, newRev, resume)
		}
		return
	}
}

// check judges what can be judged without the parked call: shape and
// signature by a trusted key.
func (m *Manager) check(ctx context.Context, subjID string, d *approval.Decision) error {
	if d.CallID != subjID {
		return fmt.Errorf("%w: decision for call %q published on the subject of call %q", ErrRefused, d.CallID, subjID)
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if err := d.Verify(func(pub string) bool { return m.isTrusted(ctx, pub) }); err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return nil
}

// fits judges a verified decision against the parked call.
func (m *Manager) fits(p *Parked, d *approval.Decision) error {
	refused := func(err error, format string, a ...any) error {
		return fmt.Errorf("%w: %w: %s", ErrRefused, err, fmt.Sprintf(format, a...))
	}
	if p.Status.Final() {
		return refused(ErrAlreadyDecided, "call %s is %s", p.CallID, p.Status)
	}
	if d.ArgsSHA256 != p.ArgsSHA256 {
		return refused(ErrHashMismatch, "decision hash %s, parked call hash %s", d.ArgsSHA256, p.ArgsSHA256)
	}
	if d.Approver == p.Agent && d.Outcome != approval.Reject {
		return refused(ErrSelfApproval, "approver %q is the calling agent", d.Approver)
	}
	if !m.now().Before(p.ExpiresAt) {
		return refused(ErrLate, "deadline was %s", p.ExpiresAt.Format(time.RFC3339))
	}
	switch {
	case p.IsClarify() && d.Outcome == approval.Approve:
		return refused(ErrWrongOutcome, "call %s asks a question: answer or reject it", p.CallID)
	case !p.IsClarify() && d.Outcome == approval.Answer:
		return refused(ErrWrongOutcome, "call %s asks for an approval, not an answer", p.CallID)
	case d.Outcome == approval.Answer:
		if err := p.Question.Accepts(d.Answer); err != nil {
			return refused(ErrWrongOutcome, "%v", err)
		}
	}
	if d.Outcome == approval.Approve && slices.Contains(p.ApprovedBy(), d.Approver) {
		return refused(ErrDuplicateApprover, "%q already approved call %s", d.Approver, p.CallID)
	}
	if a := d.AlwaysAllow; a != nil {
		var args map[string]any
		_ = json.Unmarshal(p.Arguments, &args)
		if err := a.ScopedTo(p.Agent, p.Tool, args); err != nil {
			return refused(err, "always_allow")
		}
	}
	return nil
}

// apply adds d to p and reports whether p's outcome became final; when it
// did, p gets its Outcome and this worker's claim.
func (m *Manager) apply(p *Parked, d *approval.Decision) bool {
	now := m.now().UTC()
	switch d.Outcome {
	case approval.Approve:
		p.Approvals = append(p.Approvals, *d)
		if len(p.Approvals) < p.Threshold() {
			return false
		}
		p.Status = approval.Approved
	case approval.Reject:
		p.Status = approval.Rejected
	case approval.Answer:
		p.Status = approval.Answered
	}
	p.Final = d
	o := &Outcome{Status: p.Status, DecidedAt: now}
	switch p.Status {
	case approval.Approved:
		var comments []string
		for _, a := range p.Approvals {
			o.Approvers = append(o.Approvers, a.Approver)
			if a.Comment != "" {
				comments = append(comments, a.Approver+": "+a.Comment)
			}
			if a.AlwaysAllow != nil {
				am := *a.AlwaysAllow
				am.CallID, am.CreatedBy, am.CreatedAt = p.CallID, nil, now
				if am.Comment == "" {
					am.Comment = a.Comment
				}
				o.Amendments = append(o.Amendments, am)
			}
		}
		for i := range o.Amendments {
			o.Amendments[i].CreatedBy = o.Approvers
		}
		o.Comment = strings.Join(comments, "; ")
	case approval.Rejected:
		o.Approvers, o.Reason, o.Comment = []string{d.Approver}, d.Reason, d.Comment
	case approval.Answered:
		o.Approvers, o.Answer, o.Comment = []string{d.Approver}, d.Answer, d.Comment
	}
	p.Outcome = o
	p.Claim = &Claim{Worker: m.opts.Name, Until: now.Add(m.opts.ClaimLease)}
	return true
}

// expire makes a pending call past its deadline final: expired, or
// answered with the default answer of a clarify question that has one.
func (m *Manager) expire(p *Parked) {
	now := m.now().UTC()
	o := &Outcome{Status: approval.Expired, DecidedAt: now,
		Reason: fmt.Sprintf("no decision before the deadline %s", p.ExpiresAt.Format(time.RFC3339))}
	if p.IsClarify() && p.Question.DefaultAnswer != nil {
		o.Status, o.Answer, o.DefaultAnswer = approval.Answered, *p.Question.DefaultAnswer, true
		o.Reason = "no answer before the deadline; the default answer was used"
	} else if len(p.Approvals) > 0 {
		o.Reason += fmt.Sprintf(" (%d of %d approvals)", len(p.Approvals), p.Threshold())
		o.Approvers = p.ApprovedBy()
	}
	p.Status, p.Outcome = o.Status, o
	p.Claim = &Claim{Worker: m.opts.Name, Until: now.Add(m.opts.ClaimLease)}
}

// refuse logs why a decision was refused and publishes the refusal.
func (m *Manager) refuse(ctx context.Context, d *approval.Decision, why error) {
	m.log.Warn("approval decision refused", "call_id", d.CallID, "approver", d.Approver,
		"public_key", d.PublicKey, "outcome", d.Outcome, "reason", why.Error())
	if d.CallID == "" || strings.ContainsAny(d.CallID, ".*> \t\r\n") {
		return
	}
	id := fmt.Sprintf("approval-refused-%s-%d", d.CallID, m.now().UnixNano())
	msg, err := events.NewMessage(approval.RefusedSubject(d.CallID), id, "toolgate://worker/"+m.opts.Name, approval.TypeApprovalRefused,
		refusal{CallID: d.CallID, Approver: d.Approver, PublicKey: d.PublicKey, Outcome: d.Outcome, Reason: why.Error(),
			Worker: m.opts.Name, Time: m.now().UTC()})
	if err == nil {
		_, err = m.js.PublishMsg(ctx, msg)
	}
	if err != nil {
		m.log.Warn("publish refusal", "call_id", d.CallID, "err", err)
	}
}

// startResume runs finish in the background, bounded by MaxResumes, unless
// this manager is already resuming the call.
func (m *Manager) startResume(ctx context.Context, p *Parked, rev uint64, resume ResumeFunc) {
	key := CallKey(p.CallID)
	m.mu.Lock()
	if m.busy[key] {
		m.mu.Unlock()
		return
	}
	m.busy[key] = true
	m.mu.Unlock()
	m.resumes.Add(1)
	go func() {
		defer m.resumes.Done()
		defer func() { m.mu.Lock(); delete(m.busy, key); m.mu.Unlock() }()
		select {
		case m.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-m.sem }()
		m.finish(ctx, p, rev, resume)
	}()
}

// finish renews the claim (proving it is still ours), stores the
// amendments, publishes the resolution, calls resume while renewing the
// claim, and records the result.
func (m *Manager) finish(ctx context.Context, p *Parked, rev uint64, resume ResumeFunc) {
	key := CallKey(p.CallID)
	rec := *p // the record the claim renewals write; p itself goes to resume
	renew := func(rev uint64) (uint64, error) {
		rec.Claim = &Claim{Worker: m.opts.Name, Until: m.now().UTC().Add(m.opts.ClaimLease)}
		val, _ := json.Marshal(&rec)
		return m.kv.Update(ctx, key, val, rev)
	}
	rev, err := renew(rev)
	if err != nil {
		m.log.Info("resume claim lost before resuming", "call_id", p.CallID, "err", err)
		return
	}
	if p.Status == approval.Approved {
		m.storeAmendments(ctx, p)
	}
	if p.ResumeAttempts == 0 {
		msg, err := events.NewMessage(approval.ResolvedSubject(p.CallID), "approval-resolved-"+p.CallID, "toolgate://worker/"+m.opts.Name,
			approval.TypeApprovalResolved, resolution{CallID: p.CallID, Agent: p.Agent, Tool: p.Tool, Outcome: *p.Outcome, Worker: m.opts.Name})
		if err == nil {
			_, err = m.js.PublishMsg(ctx, msg)
		}
		if err != nil {
			m.log.Warn("publish resolution", "call_id", p.CallID, "err", err)
		}
	}

	// Renew the claim while resume runs.
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(m.opts.ClaimLease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if r, err := renew(rev); err == nil {
					rev = r
				} else {
					m.log.Warn("renew resume claim", "call_id", p.CallID, "err", err)
				}
			}
		}
	}()
	m.log.Info("resuming call", "call_id", p.CallID, "status", p.Status)
	rerr := safeResume(ctx, resume, p, *rec.Outcome)
	close(done)
	<-stopped

	for attempt := 0; attempt < 50; attempt++ {
		cur, curRev, err := m.get(ctx, p.CallID)
		if err != nil {
			m.log.Warn("record resume", "call_id", p.CallID, "err", err)
			return
		}
		if rerr == nil {
			cur.Resumed, cur.ResumedAt, cur.Claim, cur.ResumeError = true, m.now().UTC(), nil, ""
		} else {
			cur.ResumeAttempts++
			cur.ResumeError = rerr.Error()
			backoff := min(time.Second<<min(cur.ResumeAttempts-1, 6), time.Minute)
			cur.Claim = &Claim{Worker: m.opts.Name, Until: m.now().UTC().Add(backoff)}
			m.log.Warn("resume failed; will retry", "call_id", p.CallID, "attempt", cur.ResumeAttempts, "retry_in", backoff, "err", rerr)
		}
		val, _ := json.Marshal(cur)
		if _, err := m.kv.Update(ctx, key, val, curRev); err == nil {
			return
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			m.log.Warn("record resume", "call_id", p.CallID, "err", err)
			return
		}
	}
}

func safeResume(ctx context.Context, resume ResumeFunc, p *Parked, o Outcome) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("resume panicked: %v", r)
		}
	}()
	return resume(ctx, p, o)
}

// storeAmendments writes the approval's amendments to the policy bucket
// under amendments.<id>. An amendment already stored is left as it is.
func (m *Manager) storeAmendments(ctx context.Context, p *Parked) {
	for _, a := range p.Outcome.Amendments {
		val, err := json.Marshal(a)
		if err != nil {
			continue
		}
		if _, err := m.policy.Create(ctx, approval.AmendmentKeyPrefix+a.ID, val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			m.log.Error("store amendment", "call_id", p.CallID, "amendment", a.ID, "err", err)
			continue
		}
		m.log.Info("amendment stored", "call_id", p.CallID, "amendment", a.ID, "agent", a.Agent, "tool", a.Tool,
			"command_prefix", a.CommandPrefix, "path_pattern", a.PathPattern, "created_by", a.CreatedBy)
	}
}

// sweep expires pending calls past their deadline, takes over decided calls
// whose claim lapsed (a worker died while resuming, or resume failed), and
// deletes resumed records past the retention.
func (m *Manager) sweep(ctx context.Context, resume ResumeFunc) {
	now := m.now()
	m.mu.Lock()
	var todo []*Parked
	for key, p := range m.index {
		if m.busy[key] {
			continue
		}
		switch {
		case p.Status == approval.Pending && !now.Before(p.ExpiresAt):
		case p.Status.Final() && !p.Resumed && (p.Claim == nil || now.After(p.Claim.Until)):
		case p.Resumed && now.Sub(p.ResumedAt) > m.opts.Retention:
		default:
			continue
		}
		todo = append(todo, p)
	}
	m.mu.Unlock()
	for _, stale := range todo {
		p, rev, err := m.get(ctx, stale.CallID)
		if err != nil {
			continue
		}
		switch {
		case p.Status == approval.Pending && !now.Before(p.ExpiresAt):
			m.expire(p)
		case p.Status.Final() && !p.Resumed && (p.Claim == nil || now.After(p.Claim.Until)):
			p.Claim = &Claim{Worker: m.opts.Name, Until: now.UTC().Add(m.opts.ClaimLease)}
		case p.Resumed && now.Sub(p.ResumedAt) > m.opts.Retention:
			_ = m.kv.Delete(ctx, CallKey(p.CallID), jetstream.LastRevision(rev))
			continue
		default:
			continue
		}
		val, _ := json.Marshal(p)
		newRev, err := m.kv.Update(ctx, CallKey(p.CallID), val, rev)
		if err != nil {
			continue // another worker got there first
		}
		if p.Status == approval.Expired || p.Outcome.DefaultAnswer {
			m.log.Info("parked call expired", "call_id", p.CallID, "agent", p.Agent, "tool", p.Tool, "status", p.Status)
		} else {
			m.log.Warn("taking over the resume of a decided call", "call_id", p.CallID, "status", p.Status, "attempts", p.ResumeAttempts)
		}
		m.startResume(ctx, p, newRev, resume)
	}
}
