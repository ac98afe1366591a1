package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/auditchain"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
	"github.com/toolgate/toolgate/pkg/trust"
)

// AuditLine is one audit event as `toolctl audit --json` prints it: the
// CloudEvent's type and id with its data.
type AuditLine struct {
	Type string           `json:"type"`
	ID   string           `json:"id"`
	Data events.AuditData `json:"data"`
}

// cmdAudit prints the audit trail: one line per decision and per
// execution, oldest first, filtered by agent and tool.
func cmdAudit(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("audit", "usage: toolctl audit [--follow] [--agent A] [--tool T] [--since D] [--json] | --verify [--live-within D]")
	follow := fs.Bool("follow", false, "keep printing new audit events until interrupted")
	verifyChains := fs.Bool("verify", false, "check the whole trail: every event's signature, every worker's chain and checkpoints, and an execution event for every final result")
	liveWithin := fs.Duration("live-within", 3*events.AuditLivenessPeriod, "with --verify: a chain without its closing checkpoint is its running worker's open tail while its last checkpoint is younger than this; older, its tail is reported lost")
	agent := fs.String("agent", "", "only this agent's calls")
	tool := fs.String("tool", "", "only calls of this tool (its canonical name)")
	since := fs.Duration("since", 24*time.Hour, "start with events stored this long ago")
	asJSON := fs.Bool("json", false, "print one JSON object per event")
	_, code, ok := parseWords(fs, args, 0, 0)
	if !ok {
		return code
	}
	subject, err := auditFilter(*agent, *tool)
	if err != nil {
		return env.fail(ExitUsage, "%v", err)
	}
	if *verifyChains && (*follow || *agent != "" || *tool != "") {
		return env.fail(ExitUsage, "--verify checks the whole trail: no --follow, --agent or --tool")
	}
	nc, js, code := env.jetStream()
	if js == nil {
		return code
	}
	defer nc.Close()
	if *verifyChains {
		return env.verifyAudit(ctx, js, *liveWithin)
	}
	cons, code := env.auditConsumer(ctx, js, subject, *since)
	if cons == nil {
		return code
	}
	verify, err := env.auditVerifier()
	if err != nil {
		return env.fail(ExitUsage, "%v", err)
	}
	refused := 0
	print := func(subject string, h nats.Header, data []byte) {
		if strings.HasPrefix(subject, events.AuditCheckpointSubject("")) {
			return // a chain's checkpoint: --verify reads them
		}
		ev, ap, err := verify.Audit(subject, h, data)
		if err != nil {
			// Not an event a trusted worker made: not listed as one.
			refused++
			fmt.Fprintf(env.Stderr, "toolctl: refused %s %s: %v\n", subject, ev.ID(), err)
			return
		}
		a := *ap
		if *asJSON {
			b, _ := json.Marshal(AuditLine{Type: ev.Type(), ID: ev.ID(), Data: a})
			fmt.Fprintln(env.Stdout, string(b))
			return
		}
		fmt.Fprintln(env.Stdout, FormatAudit(a))
	}
	// One stream, delivered in order: stored and live events print alike.
	show := func(m jetstream.Msg) { print(m.Subject(), m.Headers(), m.Data()) }
	if err := drain(ctx, cons, *follow, show, show, func() {}); err != nil && !errors.Is(err, context.Canceled) {
		return env.fail(ExitNoReach, "%v", err)
	}
	if refused > 0 {
		return env.fail(ExitFailed, "%d audit events refused: unsigned, not signed by a trusted worker, or not what they claim", refused)
	}
	return ExitOK
}

// verifyAudit reads the whole audit stream and checks every event's
// signature and every worker's chain and checkpoints (internal/auditchain):
// a removed, changed or inserted event, a lost tail, a removed chain, and
// a final result without its execution event are reported, and exit 1.
func (e *Env) verifyAudit(ctx context.Context, js jetstream.JetStream, liveWithin time.Duration) int {
	tr, code := e.readTrail(ctx, js, liveWithin, nil)
	if tr == nil {
		return code
	}
	problems := tr.report(e.Stdout)
	unaudited, err := e.resultsWithoutAudit(ctx, js, tr.executed)
	if err != nil {
		return e.fail(ExitNoReach, "%v", err)
	}
	problems += unaudited
	if problems > 0 {
		return e.fail(ExitFailed, "the audit trail does not verify: %d problems", problems)
	}
	fmt.Fprintln(e.Stdout, "the audit trail verifies")
	return ExitOK
}

// trail is what reading the whole audit stream found.
type trail struct {
	refused  []string // the events refused, one line each
	chains   []auditchain.Report
	unchain  int             // signed events without a chain (written before chains)
	executed map[string]bool // agent.call id of every execution event
}

// problems counts the refused events and the chains' breaks.
func (t *trail) problems() int {
	n := len(t.refused)
	for _, r := range t.chains {
		n += len(r.Problems)
	}
	return n
}

// report prints every refused event and each chain's state and returns
// the number of problems.
func (t *trail) report(w io.Writer) int {
	for _, l := range t.refused {
		fmt.Fprintln(w, l)
	}
	for _, r := range t.chains {
		state := "ok"
		switch {
		case len(r.Problems) > 0:
			state = "BROKEN"
		case r.Open:
			state = "open (its worker runs)"
		}
		fmt.Fprintf(w, "chain %s: %d events, %d under a signed checkpoint: %s\n", r.Chain, r.Events, r.Checked, state)
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	if t.unchain > 0 {
		fmt.Fprintf(w, "%d signed events without a chain (written before audit chains)\n", t.unchain)
	}
	return t.problems()
}

// readTrail reads the whole audit stream, verifying every event's
// signature and every worker's chain and checkpoints (a chain without its
// closing checkpoint is its running worker's open tail while its last
// checkpoint is younger than liveWithin), and hands each verified audit
// event to visit (when set), in stream order. Nil and the exit code when
// the stream cannot be read.
func (e *Env) readTrail(ctx context.Context, js jetstream.JetStream, liveWithin time.Duration, visit func(*events.AuditData)) (*trail, int) {
	verify, err := e.auditVerifier()
	if err != nil {
		return nil, e.fail(ExitUsage, "%v", err)
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamAudit, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectAudit}})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, e.fail(ExitNoReach, "no audit stream %s yet: start a worker first", bus.StreamAudit)
	}
	if err != nil {
		return nil, e.fail(ExitNoReach, "read %s: %v", bus.StreamAudit, err)
	}
	var (
		chains = auditchain.Chains{Now: time.Now(), LiveWithin: liveWithin}
		tr     = trail{executed: map[string]bool{}}
	)
	if s, err := js.Stream(ctx, bus.StreamAudit); err == nil && s.CachedInfo().Config.MaxAge > 0 {
		chains.Horizon = chains.Now.Add(-s.CachedInfo().Config.MaxAge)
	}
	// Signatures are checked on every core, and what they give is
	// applied in stream order, a batch at a time.
	batch := make([]jetstream.Msg, 0, trailBatch)
	out := make([]checked, 0, trailBatch)
	apply := func() {
		out = out[:len(batch)]
		verifyBatch(verify, batch, out)
		for i := range out {
			c := &out[i]
			switch {
			case c.refused != "":
				tr.refused = append(tr.refused, c.refused)
			case c.checkpoint != nil:
				chains.AddCheckpoint(c.checkpoint.chain, c.checkpoint.cp)
			case c.audit.Chain == "":
				tr.unchain++ // written before audit chains
			default:
				chains.Add(c.audit.Chain, c.link)
			}
			if c.audit != nil {
				if c.audit.Kind == events.AuditExecution {
					tr.executed[c.audit.Agent+"."+c.audit.CallID] = true
				}
				if visit != nil {
					visit(c.audit)
				}
			}
			*c = checked{}
		}
		batch = batch[:0]
	}
	keep := func(m jetstream.Msg) {
		if batch = append(batch, m); len(batch) == trailBatch {
			apply()
		}
	}
	if err := drainAll(ctx, js, bus.StreamAudit, events.SubjectAudit, cons, keep); err != nil {
		return nil, e.fail(ExitNoReach, "%v", err)
	}
	apply()
	tr.chains = chains.Check()
	return &tr, ExitOK
}

// drainAll hands every message of stream (whose one subject filter is)
// to keep, in order: at
// least as many as its leader says it holds when reading starts. A
// consumer served by a replica still catching up (a node just restarted)
// says it has caught up before it has; reading stopped there verified a
// trail cut short, and reported calls without their execution event that
// have one. So while fewer were read, it reads on from the last one read,
// for up to trailCatchUp, and else says how many it could read.
func drainAll(ctx context.Context, js jetstream.JetStream, stream, filter string, cons jetstream.Consumer, keep func(jetstream.Msg)) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	want := s.CachedInfo().State.Msgs
	var read, last uint64
	count := func(m jetstream.Msg) {
		read++
		if md, err := m.Metadata(); err == nil {
			last = md.Sequence.Stream
		}
		keep(m)
	}
	end := time.Now().Add(trailCatchUp)
	for {
		if err := drain(ctx, cons, false, count, count, func() {}); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		if read >= want || ctx.Err() != nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("read %d of the %d messages of %s: the server answering is behind", read, want, stream)
		}
		time.Sleep(trailCatchUpPause)
		cons, err = js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter},
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: last + 1})
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
	}
}

// trailCatchUp bounds how long drainAll waits for a replica behind, asking
// again every trailCatchUpPause.
const (
	trailCatchUp      = 30 * time.Second
	trailCatchUpPause = 500 * time.Millisecond
)

// trailBatch is how many audit events readTrail verifies at a time.
const trailBatch = 512

// checked is what verifying one stored message gave: a refusal, a
// checkpoint, or an audit event and its chain link.
type checked struct {
	refused    string
	checkpoint *chainCheckpoint
	audit      *events.AuditData
	link       auditchain.Link
}

// chainCheckpoint is a verified checkpoint of a chain.
type chainCheckpoint struct {
	chain string
	cp    auditchain.Checkpoint
}

// verifyBatch verifies msgs into out (as long), on every core.
func verifyBatch(verify *eventsig.Verifier, msgs []jetstream.Msg, out []checked) {
	workers := min(runtime.GOMAXPROCS(0), len(msgs))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(msgs); i += workers {
				out[i] = verifyMsg(verify, msgs[i])
			}
		})
	}
	wg.Wait()
}

// verifyMsg verifies one stored message of the audit stream.
func verifyMsg(verify *eventsig.Verifier, m jetstream.Msg) checked {
	if strings.HasPrefix(m.Subject(), events.AuditCheckpointSubject("")) {
		ev, cp, err := verify.Checkpoint(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			return checked{refused: fmt.Sprintf("refused %s %s: %v", m.Subject(), ev.ID(), err)}
		}
		return checked{checkpoint: &chainCheckpoint{cp.Chain, auditchain.Checkpoint{Seq: cp.Seq, Head: cp.Head, ID: ev.ID(), Time: cp.Time,
			Opening: cp.Opening, Final: cp.Final, Anchor: cp.Anchor, AnchorTime: cp.AnchorTime}}}
	}
	ev, a, err := verify.Audit(m.Subject(), m.Headers(), m.Data())
	if err != nil {
		return checked{refused: fmt.Sprintf("refused %s %s: %v", m.Subject(), ev.ID(), err)}
	}
	c := checked{audit: a}
	if a.Chain != "" {
		c.link = auditchain.Link{Seq: a.Seq, Prev: a.Prev, Hash: events.EventHash(events.EventSigningInput(ev)), ID: ev.ID()}
	}
	return c
}

// resultsWithoutAudit cross-checks the results stream against the audit
// trail: every final result of a call (stored since the audit stream's
// oldest event, so that an expired event is not taken for a missing one)
// must have an execution audit event (executed, by agent.call id). It
// prints each call that lacks one and returns how many do. Results that
// do not verify are no worker's and are not counted.
func (e *Env) resultsWithoutAudit(ctx context.Context, js jetstream.JetStream, executed map[string]bool) (int, error) {
	verify, err := e.auditVerifier()
	if err != nil {
		return 0, err
	}
	as, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", bus.StreamAudit, err)
	}
	var since time.Time // results older than the audit's retention are not checked
	if age := as.CachedInfo().Config.MaxAge; age > 0 {
		since = time.Now().Add(-age)
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamResults, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectResults}})
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", bus.StreamResults, err)
	}
	seen := map[string]bool{}
	var missing []string
	check := func(m jetstream.Msg) {
		agent, callID, ok := resultSubjectIDs(m.Subject())
		if !ok {
			return
		}
		if md, err := m.Metadata(); err == nil && md.Timestamp.Before(since) {
			return
		}
		r, err := verify.Result(m.Headers(), m.Data(), agent, callID, "")
		key := agent + "." + callID
		if err != nil || !r.Status.Final() || seen[key] {
			return
		}
		seen[key] = true
		if !executed[key] {
			missing = append(missing, fmt.Sprintf("call %s of agent %s: final result %s without an execution audit event", callID, agent, r.Status))
		}
	}
	if err := drainAll(ctx, js, bus.StreamResults, events.SubjectResults, cons, check); err != nil {
		return 0, err
	}
	for _, line := range missing {
		fmt.Fprintln(e.Stdout, line)
	}
	fmt.Fprintf(e.Stdout, "results: %d calls with a final result, %d without their execution event\n", len(seen), len(missing))
	return len(missing), nil
}

// resultSubjectIDs splits a result subject toolgate.result.<agent>.<call id>.
func resultSubjectIDs(subject string) (agent, callID string, ok bool) {
	rest, found := strings.CutPrefix(subject, events.Prefix+".result.")
	if !found {
		return "", "", false
	}
	agent, callID, ok = strings.Cut(rest, ".")
	return agent, callID, ok && agent != "" && callID != "" && !strings.Contains(callID, ".")
}

// auditVerifier verifies audit events against the account that issued
// the credentials toolctl connected with.
func (e *Env) auditVerifier() (*eventsig.Verifier, error) {
	v, err := trust.NewVerifier(e.trusted(), nil)
	if err != nil {
		return nil, fmt.Errorf("trusted accounts: %w", err)
	}
	return eventsig.New(v), nil
}

// auditConsumer reads the audit events on subject stored in the last
// since, in order, then the new ones; nil and the exit code when the
// audit stream cannot be read.
func (e *Env) auditConsumer(ctx context.Context, js jetstream.JetStream, subject string, since time.Duration) (jetstream.Consumer, int) {
	start := time.Now().Add(-since)
	cons, err := js.OrderedConsumer(ctx, bus.StreamAudit, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start,
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, e.fail(ExitNoReach, "no audit stream %s yet: start a worker first", bus.StreamAudit)
	}
	if err != nil {
		return nil, e.fail(ExitNoReach, "read %s: %v", bus.StreamAudit, err)
	}
	return cons, ExitOK
}

// auditFilter is the audit subject of agent's calls of tool (empty: any).
func auditFilter(agent, tool string) (string, error) {
	tok := func(flag, v string) (string, error) {
		if v == "" {
			return "*", nil
		}
		if err := events.ValidToken(v); err != nil {
			return "", fmt.Errorf("--%s: %w", flag, err)
		}
		return v, nil
	}
	a, err := tok("agent", agent)
	if err != nil {
		return "", err
	}
	t, err := tok("tool", tool)
	if err != nil {
		return "", err
	}
	return events.AuditSubject(a, t), nil
}

// FormatAudit renders an audit event on one line: when, what, who, the
// call, the decision and its rule and revision, the outcome, and the
// hashes a pipeline checks.
func FormatAudit(a events.AuditData) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-9s %s/%s %s", a.Time.UTC().Format(time.RFC3339Nano), a.Kind, a.Agent, a.Tool, a.CallID)
	if d := a.Decision; d != nil {
		fmt.Fprintf(&b, " %s", d.Action)
		if d.Rule != "" {
			fmt.Fprintf(&b, " rule=%s", d.Rule)
		}
		if d.Revision != "" {
			fmt.Fprintf(&b, " rev=%s", d.Revision)
		}
	}
	if len(a.DecidedBy) > 0 {
		fmt.Fprintf(&b, " by=%s", strings.Join(a.DecidedBy, ","))
	}
	if a.Kind == events.AuditExecution || a.Kind == "" {
		fmt.Fprintf(&b, " status=%s", a.Status)
		if a.Error != "" {
			fmt.Fprintf(&b, " error=%s", a.Error)
		}
		if ap := a.Approval; ap != nil && len(ap.Approvers) > 0 {
			fmt.Fprintf(&b, " approved_by=%s", strings.Join(ap.Approvers, ","))
		}
	}
	fmt.Fprintf(&b, " %dms worker=%s args=%s", a.DurationMS, a.Worker, short(a.ArgsSHA256))
	if a.ResultSHA256 != "" {
		fmt.Fprintf(&b, " result=%s", short(a.ResultSHA256))
	}
	if a.TraceID != "" {
		fmt.Fprintf(&b, " trace=%s", a.TraceID)
	}
	return b.String()
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
