package eventsig

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
)

// ErrForged wraps every reason an event is refused: unsigned, signed by
// no trusted worker, or not the event of the call it claims to be.
var ErrForged = errors.New("event refused")

// Reasons a signed event is not the one its reader waits for; each wraps
// ErrForged. Reason names them, and every other reason, for the vectors.
var (
	// ErrWrongType: the event is of another type than the one read.
	ErrWrongType = fmt.Errorf("%w: wrong event type", ErrForged)
	// ErrWrongSource: the event's source is not a worker's.
	ErrWrongSource = fmt.Errorf("%w: not from a worker", ErrForged)
	// ErrWrongCall: the event is of another call (a replay).
	ErrWrongCall = fmt.Errorf("%w: another call's event", ErrForged)
	// ErrWrongAgent: the event is for another agent.
	ErrWrongAgent = fmt.Errorf("%w: another agent's event", ErrForged)
	// ErrWrongTool: the event names another tool than the one read.
	ErrWrongTool = fmt.Errorf("%w: another tool's event", ErrForged)
)

// workerSource starts the source of every event a worker makes.
const workerSource = "toolgate://worker/"

// Sign returns the events.SignFunc of signer (a worker's key and JWT);
// nil when signer has no key or no JWT. The ed25519 key is derived from
// the seed once, not on every signature.
func Sign(s trust.Signer) events.SignFunc {
	if s.Key == nil || s.JWT == "" {
		return nil
	}
	priv, err := privateKey(s)
	if err != nil {
		return func([]byte) (string, string, error) { return "", "", err }
	}
	return func(input []byte) (string, string, error) {
		return base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, input)), s.JWT, nil
	}
}

// Verifier verifies events against the accounts a reader trusts. It
// keeps the signers it has checked, so a JWT is decoded once.
type Verifier struct {
	v  *trust.Verifier
	mu sync.Mutex
	// signers are the JWTs checked before, with who they name.
	signers map[string]signer
}

// New verifies with v; a nil or empty v refuses every event.
func New(v *trust.Verifier) *Verifier {
	return &Verifier{v: v, signers: map[string]signer{}}
}

// maxSigners bounds the JWTs a Verifier keeps (a fleet has few workers).
const maxSigners = 1024

// Verify checks ev's signature, of either form (signed alone, or
// co-signed with other events: doc.go), and returns the worker that
// made it.
func (v *Verifier) Verify(ev event.Event) (trust.Identity, error) {
	sig, signer := events.Signature(ev)
	if sig == "" || signer == "" {
		return trust.Identity{}, fmt.Errorf("%w: %s: %w", ErrForged, ev.ID(), trust.ErrUnsigned)
	}
	c, err := v.signer(signer)
	if err != nil {
		return c.id, fmt.Errorf("%w: %s: %w", ErrForged, ev.ID(), err)
	}
	if err := verifySignature(c.key, events.EventSigningInput(ev), sig); err != nil {
		return c.id, fmt.Errorf("%w: %s: %w: key %s: %v", ErrForged, ev.ID(), trust.ErrBadSignature, c.id.PublicKey, err)
	}
	return c.id, nil
}

// signer checks a worker's JWT, once until it expires.
func (v *Verifier) signer(token string) (signer, error) {
	if v == nil {
		return signer{}, trust.ErrForeignIssuer
	}
	now := time.Now().Unix()
	v.mu.Lock()
	c, ok := v.signers[token]
	v.mu.Unlock()
	if ok && (c.expires == 0 || now < c.expires) {
		return c, nil
	}
	id, err := v.v.UserJWT(token, trust.RoleWorker)
	if err != nil {
		return signer{id: id}, err
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil { // decoded a moment ago
		return signer{id: id}, err
	}
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(id.PublicKey))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return signer{id: id}, fmt.Errorf("%w: public key %s: %v", trust.ErrBadJWT, id.PublicKey, err)
	}
	c = signer{id: id, key: ed25519.PublicKey(raw), expires: uc.Expires}
	v.mu.Lock()
	if len(v.signers) >= maxSigners {
		clear(v.signers)
	}
	v.signers[token] = c
	v.mu.Unlock()
	return c, nil
}

// signer is a worker JWT checked before.
type signer struct {
	id      trust.Identity
	key     ed25519.PublicKey
	expires int64 // Unix seconds; 0 never
}

// Result decodes the result message of call callID of agent and returns
// it when it verifies: signed by a trusted worker, of type
// dev.toolgate.call.completed.v1 from a worker source, with the call's
// id in its subject attribute, event id and data, and the agent in its
// data. tool, when not empty, must be the tool the result names.
func (v *Verifier) Result(h nats.Header, data []byte, agent, callID, tool string) (*events.ResultData, error) {
	var r events.ResultData
	ev, err := events.DecodeData(h, data, &r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForged, err)
	}
	if _, err := v.Verify(ev); err != nil {
		return nil, err
	}
	switch {
	case ev.Type() != events.TypeCallCompleted:
		return nil, fmt.Errorf("%w: %s is a %s, not a result", ErrWrongType, ev.ID(), ev.Type())
	case !strings.HasPrefix(ev.Source(), workerSource):
		return nil, fmt.Errorf("%w: %s comes from %s", ErrWrongSource, ev.ID(), ev.Source())
	case ev.Subject() != callID || r.CallID != callID || !strings.HasPrefix(ev.ID(), events.AgentKey(agent, callID)+":"):
		return nil, fmt.Errorf("%w: %s is the result of call %q, not %q", ErrWrongCall, ev.ID(), r.CallID, callID)
	case r.Agent != agent:
		return nil, fmt.Errorf("%w: %s is a result for agent %q, not %q", ErrWrongAgent, ev.ID(), r.Agent, agent)
	case tool != "" && r.Tool != "" && r.Tool != tool:
		return nil, fmt.Errorf("%w: %s is a result of tool %q, not %q", ErrWrongTool, ev.ID(), r.Tool, tool)
	}
	return &r, nil
}

// Audit decodes an audit message stored on subject and returns its event
// and data when it verifies: signed by a trusted worker, an execution or
// decision audit event from a worker source, whose data names the agent
// and tool of subject (toolgate.audit.<agent>.<tool>) and whose id names
// its call.
func (v *Verifier) Audit(subject string, h nats.Header, data []byte) (event.Event, *events.AuditData, error) {
	var a events.AuditData
	ev, err := events.DecodeData(h, data, &a)
	if err != nil {
		return ev, nil, fmt.Errorf("%w: %w", ErrForged, err)
	}
	if _, err := v.Verify(ev); err != nil {
		return ev, nil, err
	}
	agent, tool, _ := strings.Cut(strings.TrimPrefix(subject, events.Prefix+".audit."), ".")
	switch {
	case ev.Type() != events.TypeCallAudited && ev.Type() != events.TypeDecisionAudited:
		return ev, nil, fmt.Errorf("%w: %s is a %s, not an audit event", ErrWrongType, ev.ID(), ev.Type())
	case !strings.HasPrefix(ev.Source(), workerSource):
		return ev, nil, fmt.Errorf("%w: %s comes from %s", ErrWrongSource, ev.ID(), ev.Source())
	case agent != token(a.Agent) || tool != token(a.Tool):
		return ev, nil, fmt.Errorf("%w: %s names agent %q and tool %q, stored under %s", ErrForged, ev.ID(), a.Agent, a.Tool, subject)
	case !strings.HasPrefix(ev.ID(), events.AgentKey(a.Agent, a.CallID)+":"):
		return ev, nil, fmt.Errorf("%w: %s is not an event of call %q", ErrForged, ev.ID(), a.CallID)
	}
	return ev, &a, nil
}

// Checkpoint decodes an audit chain checkpoint stored on subject and
// returns its event and data when it verifies: signed by a trusted
// worker, of type dev.toolgate.audit.checkpoint.v1 from a worker source,
// stored under toolgate.audit.$chain.<the worker it names>.
func (v *Verifier) Checkpoint(subject string, h nats.Header, data []byte) (event.Event, *events.AuditCheckpointData, error) {
	var d events.AuditCheckpointData
	ev, err := events.DecodeData(h, data, &d)
	if err != nil {
		return ev, nil, fmt.Errorf("%w: %w", ErrForged, err)
	}
	if _, err := v.Verify(ev); err != nil {
		return ev, nil, err
	}
	switch {
	case ev.Type() != events.TypeAuditCheckpoint:
		return ev, nil, fmt.Errorf("%w: %s is a %s, not a checkpoint", ErrWrongType, ev.ID(), ev.Type())
	case ev.Source() != workerSource+d.Worker || subject != events.AuditCheckpointSubject(token(d.Worker)):
		return ev, nil, fmt.Errorf("%w: %s is worker %q's checkpoint, from %s on %s", ErrForged, ev.ID(), d.Worker, ev.Source(), subject)
	}
	return ev, &d, nil
}

// token is how an agent or tool name stands in an audit subject.
func token(s string) string {
	if events.ValidToken(s) != nil {
		return "_"
	}
	return s
}

// Reason names why err refused an event, as the vectors
// (testdata/vectors.json) name it and every client reports it: "" when
// err is nil, else one of "malformed", "unsigned", "bad-jwt",
// "foreign-issuer", "expired", "wrong-role", "bad-signature",
// "wrong-type", "wrong-source", "wrong-call", "wrong-agent",
// "wrong-tool", or "refused" for anything else.
func Reason(err error) string {
	var de *events.DecodeError
	reasons := []struct {
		err  error
		name string
	}{
		{trust.ErrUnsigned, "unsigned"},
		{trust.ErrBadJWT, "bad-jwt"},
		{trust.ErrForeignIssuer, "foreign-issuer"},
		{trust.ErrExpired, "expired"},
		{trust.ErrWrongRole, "wrong-role"},
		{trust.ErrBadSignature, "bad-signature"},
		{ErrWrongType, "wrong-type"},
		{ErrWrongSource, "wrong-source"},
		{ErrWrongCall, "wrong-call"},
		{ErrWrongAgent, "wrong-agent"},
		{ErrWrongTool, "wrong-tool"},
	}
	switch {
	case err == nil:
		return ""
	case errors.As(err, &de):
		return "malformed"
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "refused"
}
