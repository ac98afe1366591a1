package parking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
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
	// ErrStale: the decision was made before the call was parked (a
	// decision on an earlier call under the same id, replayed).
	ErrStale = errors.New("decision predates the parked call")
	// ErrTampered: the parked record no longer holds what was parked or
	// approved (its arguments hash otherwise, an approval does not verify).
	ErrTampered = errors.New("parked call record was altered")
)

// Refusal codes name, in a refusal event's code field, the reasons a
// reader of the event acts on, so it can match them without parsing the
// reason text. Other reasons have no code.
const (
	// RefusalAlreadyDecided is the code of ErrAlreadyDecided.
	RefusalAlreadyDecided = "already_decided"
	// RefusalDuplicateApprover is the code of ErrDuplicateApprover.
	RefusalDuplicateApprover = "duplicate_approver"
)

// refusalCode is the code a refusal for why carries, or "".
func refusalCode(why error) string {
	switch {
	case errors.Is(why, ErrAlreadyDecided):
		return RefusalAlreadyDecided
	case errors.Is(why, ErrDuplicateApprover):
		return RefusalDuplicateApprover
	}
	return ""
}

// RefusalError is a refusal as read from its event: the worker's reason,
// matching with errors.Is the error its code names (ErrAlreadyDecided,
// ErrDuplicateApprover), and always ErrRefused.
type RefusalError struct {
	// Code is the event's code field; "" for reasons without one.
	Code string
	// Reason is the event's reason text.
	Reason string
}

// Error returns the worker's reason.
func (e *RefusalError) Error() string { return e.Reason }

// Unwrap returns ErrRefused and the error Code names, if any.
func (e *RefusalError) Unwrap() []error {
	switch e.Code {
	case RefusalAlreadyDecided:
		return []error{ErrRefused, ErrAlreadyDecided}
	case RefusalDuplicateApprover:
		return []error{ErrRefused, ErrDuplicateApprover}
	}
	return []error{ErrRefused}
}

// Refusal is the data of a dev.toolgate.approval.refused.v1 event, as
// workers publish it and the approver service reads it.
type Refusal struct {
	CallID    string           `json:"call_id"`
	Approver  string           `json:"approver,omitempty"`
	PublicKey string           `json:"public_key,omitempty"`
	Outcome   approval.Outcome `json:"outcome,omitempty"`
	Signer    string           `json:"signer,omitempty"`
	Reason    string           `json:"reason"`
	// Code names the reason for readers that act on it: one of the
	// Refusal* constants, or empty.
	Code   string    `json:"code,omitempty"`
	Worker string    `json:"worker"`
	Time   time.Time `json:"time"`
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
func decodeDecision(msg fate.Message) (*approval.Decision, error) {
	var d approval.Decision
	if _, err := events.DecodeData(msg.Headers(), msg.Data(), &d); err != nil {
		return nil, fmt.Errorf("decision: %w", err)
	}
	return &d, nil
}

// handleDecision records one decision on a parked call and starts the
// resume once the call's outcome is final. It returns the decision
// message's fate: Term for a decision that can never count (unreadable,
// unsigned, for no parked call), Ack once recorded or refused for good,
// Retry when the record could not be read or written now.
func (m *Manager) handleDecision(ctx context.Context, msg fate.Message, resume ResumeFunc) fate.Fate {
	subjID := strings.TrimPrefix(msg.Subject(), strings.TrimSuffix(approval.SubjectDecisions, ">"))
	d, err := decodeDecision(msg)
	if err != nil {
		m.refuse(ctx, &approval.Decision{CallID: subjID}, fmt.Errorf("%w: %v", ErrRefused, err))
		return fate.Term("unreadable decision")
	}
	signer, err := m.check(ctx, subjID, d)
	if err != nil {
		m.refuse(ctx, d, err)
		return fate.Term("refused decision")
	}
	for attempt := 0; ; attempt++ {
		p, rev, err := m.get(ctx, "", d.CallID)
		if errors.Is(err, ErrNotFound) {
			m.refuse(ctx, d, fmt.Errorf("%w: %w", ErrRefused, err))
			return fate.Term("no parked call")
		}
		if err != nil {
			return fate.Retry(time.Second, fmt.Errorf("load parked call %s: %w", d.CallID, err))
		}
		err = m.fits(p, d, signer)
		if err == nil {
			err = m.fitsEdit(ctx, p, d) // approve with changes (edit.go)
		}
		if err != nil {
			if errors.Is(err, ErrAlreadyDecided) || errors.Is(err, ErrDuplicateApprover) {
				m.log.Info("decision changes nothing", "call_id", d.CallID, "approver", d.Approver, "reason", err)
			}
			m.refuse(ctx, d, err)
			return fate.Ack()
		}
		final := m.apply(p, d)
		val, err := json.Marshal(p)
		if err != nil {
			m.log.Error("encode parked call", "call_id", p.CallID, "err", err)
			return fate.Term("parked call cannot be encoded")
		}
		newRev, err := m.kv.Update(ctx, CallKey(p.Agent, p.CallID), val, rev)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) && attempt < 50 {
				continue // someone else changed it first: judge again on the new record
			}
			return fate.Retry(time.Second, fmt.Errorf("record decision on call %s: %w", p.CallID, err))
		}
		m.log.Info("decision recorded", "call_id", p.CallID, "agent", p.Agent, "tool", p.Tool,
			"approver", d.Approver, "signer", signer.String(), "outcome", d.Outcome, "status", p.Status,
			"approvals", len(p.Approvals), "threshold", p.Threshold())
		if final {
			m.startResume(ctx, p, newRev, resume)
		}
		return fate.Ack()
	}
}

// check judges what can be judged without the parked call: shape, the
// signature, and that the signer may approve. It returns the signer.
func (m *Manager) check(ctx context.Context, subjID string, d *approval.Decision) (trust.Identity, error) {
	if d.CallID != subjID {
		return trust.Identity{}, fmt.Errorf("%w: decision for call %q published on the subject of call %q", ErrRefused, d.CallID, subjID)
	}
	if err := d.Validate(); err != nil {
		return trust.Identity{}, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if err := d.VerifySignature(); err != nil {
		return trust.Identity{}, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	id, err := m.Signer(ctx, d)
	if err != nil {
		return id, fmt.Errorf("%w: %w: %w", ErrRefused, approval.ErrUntrustedKey, err)
	}
	return id, nil
}

// fits judges a verified decision by signer against the parked call. The
// call's arguments are hashed again here: the record's args_sha256 field
// alone proves nothing, as the record may have been altered since parking.
func (m *Manager) fits(p *Parked, d *approval.Decision, signer trust.Identity) error {
	refused := func(err error, format string, a ...any) error {
		return fmt.Errorf("%w: %w: %s", ErrRefused, err, fmt.Sprintf(format, a...))
	}
	if p.Status.Final() {
		return refused(ErrAlreadyDecided, "call %s is %s", p.CallID, p.Status)
	}
	// Rejecting is always safe, even a record that was altered.
	if h := approval.ArgsHash(p.Agent, p.Tool, p.Arguments); h != p.ArgsSHA256 && d.Outcome != approval.Reject {
		return refused(ErrTampered, "the stored arguments hash to %s, not to %s taken when the call was parked", h, p.ArgsSHA256)
	}
	if d.ArgsSHA256 != p.ArgsSHA256 {
		return refused(ErrHashMismatch, "decision hash %s, parked call hash %s", d.ArgsSHA256, p.ArgsSHA256)
	}
	if d.Outcome != approval.Reject {
		if err := selfApproval(p.Agent, d, signer); err != nil {
			return refused(err, "")
		}
	}
	if !m.now().Before(p.ExpiresAt) {
		return refused(ErrLate, "deadline was %s", p.ExpiresAt.Format(time.RFC3339))
	}
	if d.DecidedAt.Before(p.ParkedAt.Add(-clockSkew)) {
		return refused(ErrStale, "decided at %s, parked at %s", d.DecidedAt.Format(time.RFC3339), p.ParkedAt.Format(time.RFC3339))
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
	if d.Outcome == approval.Approve && slices.ContainsFunc(p.Approvals, func(a approval.Decision) bool { return trust.SameName(a.Approver, d.Approver) }) {
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

// clockSkew is how far an approver's clock may run behind a worker's
// before its decisions look older than the calls they decide.
const clockSkew = 5 * time.Minute

// selfApproval refuses a decision on agent's call by a person whose name is
// the agent's under trust.Fold, or signed by an identity that is the agent
// (same folded name, or the agent role).
func selfApproval(agent string, d *approval.Decision, signer trust.Identity) error {
	switch {
	case trust.SameName(d.Approver, agent):
		return fmt.Errorf("%w: approver %q is the calling agent %q", ErrSelfApproval, d.Approver, agent)
	case signer.Role == trust.RoleAgent:
		return fmt.Errorf("%w: signed by agent identity %s", ErrSelfApproval, signer)
	case signer.Account != "" && trust.SameName(signer.Name, agent):
		return fmt.Errorf("%w: signer %s is the calling agent %q", ErrSelfApproval, signer, agent)
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
				grant := a
				am.CallID, am.CreatedBy, am.CreatedAt, am.Grant = p.CallID, nil, now, &grant
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
		if d.Edited() {
			o.EditedArguments, o.EditedArgsSHA256 = d.EditedArguments, d.EditedArgsSHA256
		}
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
	signer := ""
	if d.SignerJWT != "" {
		if uc, err := jwt.DecodeUserClaims(d.SignerJWT); err == nil {
			signer = uc.Name + " (issuer " + uc.Issuer + ")"
		}
	}
	m.log.Warn("approval decision refused", "call_id", d.CallID, "approver", d.Approver,
		"public_key", d.PublicKey, "signer", signer, "outcome", d.Outcome, "reason", why.Error())
	if d.CallID == "" || strings.ContainsAny(d.CallID, ".*> \t\r\n") {
		return
	}
	id := fmt.Sprintf("approval-refused-%s-%d", d.CallID, m.now().UnixNano())
	msg, err := events.NewMessage(approval.RefusedSubject(d.CallID), id, "toolgate://worker/"+m.opts.Name, approval.TypeApprovalRefused,
		Refusal{CallID: d.CallID, Approver: d.Approver, PublicKey: d.PublicKey, Signer: signer, Outcome: d.Outcome, Reason: why.Error(), Code: refusalCode(why),
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
	key := CallKey(p.Agent, p.CallID)
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
	key := CallKey(p.Agent, p.CallID)
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
	out, verr := m.verifyOutcome(ctx, p)
	if verr != nil {
		m.log.Error("parked call refused at resume; it does not run", "call_id", p.CallID, "agent", p.Agent, "tool", p.Tool, "err", verr)
		d := approval.Decision{CallID: p.CallID}
		if p.Final != nil {
			d = *p.Final
		}
		m.refuse(ctx, &d, verr)
		out = Outcome{Status: approval.Rejected, DecidedAt: m.now().UTC(),
			Reason: "refused at resume: " + verr.Error()}
	}
	if out.Status == approval.Approved {
		m.storeAmendments(ctx, p)
	}
	if p.ResumeAttempts == 0 {
		msg, err := events.NewMessage(approval.ResolvedSubject(p.CallID), "approval-resolved-"+p.CallID, "toolgate://worker/"+m.opts.Name,
			approval.TypeApprovalResolved, resolution{CallID: p.CallID, Agent: p.Agent, Tool: p.Tool, Outcome: out, Worker: m.opts.Name})
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
	rerr := safeResume(ctx, resume, p, out)
	close(done)
	<-stopped

	for attempt := 0; attempt < 50; attempt++ {
		cur, curRev, err := m.get(ctx, p.Agent, p.CallID)
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
		} else if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
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

// verifyOutcome judges a decided record again before it is acted on: the
// record may have been altered in the bucket since the decision was
// recorded. For an approval, the stored arguments must still hash to the
// hash taken at parking, and at least the threshold of distinct people
// must have signed approvals of exactly that hash with keys that may
// approve; the outcome returned lists only them. An answer must be the
// signed answer. Rejections and expiries run nothing and pass as they are.
func (m *Manager) verifyOutcome(ctx context.Context, p *Parked) (Outcome, error) {
	if p.Outcome == nil {
		return Outcome{}, fmt.Errorf("%w: call %s is %s without an outcome", ErrTampered, p.CallID, p.Status)
	}
	out := *p.Outcome
	if out.Status != p.Status {
		return out, fmt.Errorf("%w: status %s, outcome %s", ErrTampered, p.Status, out.Status)
	}
	h := approval.ArgsHash(p.Agent, p.Tool, p.Arguments)
	signed := func(d *approval.Decision, want approval.Outcome) error {
		switch {
		case d.CallID != p.CallID:
			return fmt.Errorf("%w: a stored decision is for call %q", ErrTampered, d.CallID)
		case d.Outcome != want:
			return fmt.Errorf("%w: a stored decision is %s, not %s", ErrTampered, d.Outcome, want)
		case d.ArgsSHA256 != h:
			return fmt.Errorf("%w: %q approved arguments hashing to %s; the stored arguments hash to %s", ErrTampered, d.Approver, d.ArgsSHA256, h)
		}
		if err := d.VerifySignature(); err != nil {
			return fmt.Errorf("%w: %w", ErrTampered, err)
		}
		signer, err := m.Signer(ctx, d)
		if err != nil {
			return fmt.Errorf("%w: %w", approval.ErrUntrustedKey, err)
		}
		return selfApproval(p.Agent, d, signer)
	}
	switch out.Status {
	case approval.Approved:
		if h != p.ArgsSHA256 {
			return out, fmt.Errorf("%w: the stored arguments hash to %s, not to %s taken when the call was parked", ErrTampered, h, p.ArgsSHA256)
		}
		var who []string
		for i := range p.Approvals {
			a := &p.Approvals[i]
			if err := signed(a, approval.Approve); err != nil {
				return out, err
			}
			if !slices.ContainsFunc(who, func(w string) bool { return trust.SameName(w, a.Approver) }) {
				who = append(who, a.Approver)
			}
		}
		if len(who) < p.Threshold() {
			return out, fmt.Errorf("%w: %d distinct signed approvals, %d needed", ErrTampered, len(who), p.Threshold())
		}
		out.Approvers = who
		edited, editedHash, err := verifyEdits(p) // approve with changes (edit.go)
		if err != nil {
			return out, err
		}
		out.EditedArguments, out.EditedArgsSHA256 = edited, editedHash
	case approval.Answered:
		if out.DefaultAnswer && p.Final == nil {
			// No one signed a default answer: it must be the one the
			// parked arguments (the clarify call) give.
			if h != p.ArgsSHA256 {
				return out, fmt.Errorf("%w: the stored arguments hash to %s, not to %s taken when the call was parked", ErrTampered, h, p.ArgsSHA256)
			}
			var args map[string]any
			_ = json.Unmarshal(p.Arguments, &args)
			q, err := approval.QuestionFrom(args)
			if err != nil || q.DefaultAnswer == nil || *q.DefaultAnswer != out.Answer {
				return out, fmt.Errorf("%w: the default answer is not the question's", ErrTampered)
			}
			break
		}
		if p.Final == nil {
			return out, fmt.Errorf("%w: answered without a decision", ErrTampered)
		}
		if err := signed(p.Final, approval.Answer); err != nil {
			return out, err
		}
		if p.Final.Answer != out.Answer {
			return out, fmt.Errorf("%w: the stored answer is not the signed one", ErrTampered)
		}
		out.Approvers = []string{p.Final.Approver}
	}
	return out, nil
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
		p, rev, err := m.get(ctx, stale.Agent, stale.CallID)
		if err != nil {
			continue
		}
		switch {
		case p.Status == approval.Pending && !now.Before(p.ExpiresAt):
			m.expire(p)
		case p.Status.Final() && !p.Resumed && (p.Claim == nil || now.After(p.Claim.Until)):
			p.Claim = &Claim{Worker: m.opts.Name, Until: now.UTC().Add(m.opts.ClaimLease)}
		case p.Resumed && now.Sub(p.ResumedAt) > m.opts.Retention:
			_ = m.kv.Delete(ctx, CallKey(p.Agent, p.CallID), jetstream.LastRevision(rev))
			continue
		default:
			continue
		}
		val, _ := json.Marshal(p)
		newRev, err := m.kv.Update(ctx, CallKey(p.Agent, p.CallID), val, rev)
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
