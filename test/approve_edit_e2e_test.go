package test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// editPolicy asks before shell commands, allows ls and denies touch.
const editPolicy = teststack.EditPolicy

// startEditStack is an approval stack under editPolicy with a directory x
// in a workspace the sandboxed commands could write to.
func startEditStack(t *testing.T) *approvalStack {
	t.Helper()
	testenv.LookPath(t, "bash", "bash")
	s := startApprovalStackWith(t, editPolicy)
	writable(t, s)
	if err := os.MkdirAll(filepath.Join(s.worker.ws, "x", "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestApproveWithChangesRunsTheEditedCall: `rm -rf x` approved with changes
// as `ls` runs ls (x is still there, the output is ls's), and the audit
// keeps the parked arguments' hash and the edited arguments.
func TestApproveWithChangesRunsTheEditedCall(t *testing.T) {
	s := startEditStack(t)
	c := s.worker.client(t, "agent-edit")
	final := submitBash(t, c, "edit-ls", "rm -rf x")

	var res approver.Result
	code := s.api(t, "POST", "/api/approvals/edit-ls/approve", `{"comment":"list it instead","arguments":{"command":"ls"}}`, &res)
	if code != 200 || res.Status != "approved" || res.EditedArgsSHA256 != approval.ArgsHash("agent-edit", "bash", json.RawMessage(`{"command":"ls"}`)) {
		t.Fatalf("approve with changes = %d %+v", code, res)
	}
	r := wait(t, final)
	if r.Status != events.StatusOK || strings.TrimSpace(r.Output) != "x" {
		t.Fatalf("result = %s %q, want ls's output", r.Status, r.Output)
	}
	if _, err := os.Stat(filepath.Join(s.worker.ws, "x", "inside")); err != nil {
		t.Fatalf("x after the edited call: %v", err)
	}

	// The audit keeps both versions.
	_, js := s.bus(t)
	exec := auditOf(t, js, "agent-edit", "edit-ls", events.AuditExecution)
	a := exec.Approval
	if a == nil || string(a.EditedArguments) != `{"command":"ls"}` || a.EditedArgsSHA256 != res.EditedArgsSHA256 {
		t.Fatalf("execution audit approval = %+v", a)
	}
	orig := worker.ArgsSHA256([]byte(`{"command":"rm -rf x"}`))
	if a.OriginalArgsSHA256 != orig || exec.ArgsSHA256 != worker.ArgsSHA256([]byte(`{"command":"ls"}`)) {
		t.Fatalf("execution audit hashes: original %s (want %s), ran %s", a.OriginalArgsSHA256, orig, exec.ArgsSHA256)
	}
	people := auditOf(t, js, "agent-edit", "edit-ls", events.AuditDecision, "alice")
	if people.ArgsSHA256 != orig || people.Approval == nil || string(people.Approval.EditedArguments) != `{"command":"ls"}` {
		t.Fatalf("people's decision audit = %+v", people)
	}
}

// TestApproveWithChangesIsJudgedAgain: an edit the policy denies, or that
// does not fit the tool's schema, is refused with what is wrong; the call
// stays parked and the edited command never runs.
func TestApproveWithChangesIsJudgedAgain(t *testing.T) {
	s := startEditStack(t)
	c := s.worker.client(t, "agent-edit")
	final := submitBash(t, c, "edit-deny", "rm -rf x")

	var e struct {
		Error string `json:"error"`
	}
	if code := s.api(t, "POST", "/api/approvals/edit-deny/approve", `{"arguments":{"command":"touch denied-marker"}}`, &e); code != 422 ||
		!strings.Contains(e.Error, "the policy refuses the edited call") || !strings.Contains(e.Error, "blacklist") {
		t.Fatalf("denied edit = %d %q", code, e.Error)
	}
	if code := s.api(t, "POST", "/api/approvals/edit-deny/approve", `{"arguments":{"cmd":"ls"}}`, &e); code != 422 || !strings.Contains(e.Error, "schema") {
		t.Fatalf("edit outside the schema = %d %q", code, e.Error)
	}
	if code := s.api(t, "POST", "/api/approvals/edit-deny/approve", `{"arguments":["ls"]}`, &e); code != 400 || !strings.Contains(e.Error, "JSON object") {
		t.Fatalf("edit not an object = %d %q", code, e.Error)
	}
	var list []approver.View
	if code := s.api(t, "GET", "/api/approvals", "", &list); code != 200 || len(list) != 1 || len(list[0].ApprovedBy) != 0 {
		t.Fatalf("after refused edits the call is not pending without approvals: %d %+v", code, list)
	}
	var res approver.Result
	if code := s.api(t, "POST", "/api/approvals/edit-deny/reject", `{"reason":"neither"}`, &res); code != 200 || res.Status != "rejected" {
		t.Fatalf("reject = %d %+v", code, res)
	}
	if r := wait(t, final); r.Status != events.StatusRejected {
		t.Fatalf("result = %+v", r)
	}
	absent(t, s.worker.ws, "denied-marker")
	if _, err := os.Stat(filepath.Join(s.worker.ws, "x", "inside")); err != nil {
		t.Fatalf("x: %v", err)
	}
}

// TestForgedEditedDecisionsAreRefused: an edited approval published on the
// bus by an insider is refused when it is unsigned, when its edited
// arguments are not the ones its hash names, or when they were swapped
// after signing; none of the commands runs.
func TestForgedEditedDecisionsAreRefused(t *testing.T) {
	s := startEditStack(t)
	c := s.worker.client(t, "agent-edit")
	final := submitBash(t, c, "edit-forged", "rm -rf x")
	nc, js := s.bus(t)
	sub, _ := nc.SubscribeSync(approval.RefusedSubject("edit-forged"))
	hash := approval.ArgsHash("agent-edit", "bash", json.RawMessage(`{"command":"rm -rf x"}`))
	if p := parked(t, js, "edit-forged"); p.ArgsSHA256 != hash {
		t.Fatalf("parked hash %s, want %s", p.ArgsSHA256, hash)
	}
	edit := func(command string) *approval.Decision {
		d := &approval.Decision{CallID: "edit-forged", ArgsSHA256: hash, Outcome: approval.Approve, Approver: "alice",
			SignerJWT: s.approver.JWT, DecidedAt: time.Now()}
		if err := d.Edit("agent-edit", "bash", []byte(`{"command":"`+command+`"}`)); err != nil {
			t.Fatal(err)
		}
		return d
	}

	unsigned := edit("touch forged-1")
	publishDecision(t, js, unsigned)
	refusedWith(t, sub, "not signed")

	mismatch := edit("ls")
	mismatch.EditedArguments = json.RawMessage(`{"command":"touch forged-2"}`)
	if err := mismatch.Sign(s.approver.Key); err != nil {
		t.Fatal(err)
	}
	publishDecision(t, js, mismatch)
	refusedWith(t, sub, approval.ErrEditedArgs.Error())

	swapped := edit("ls")
	if err := swapped.Sign(s.approver.Key); err != nil {
		t.Fatal(err)
	}
	swapped.EditedArguments = json.RawMessage(`{"command":"touch forged-3"}`)
	swapped.EditedArgsSHA256 = approval.ArgsHash("agent-edit", "bash", swapped.EditedArguments)
	publishDecision(t, js, swapped)
	refusedWith(t, sub, approval.ErrBadSignature.Error())

	var res approver.Result
	if code := s.api(t, "POST", "/api/approvals/edit-forged/reject", `{"reason":"forged"}`, &res); code != 200 || res.Status != "rejected" {
		t.Fatalf("reject = %d %+v", code, res)
	}
	if r := wait(t, final); r.Status != events.StatusRejected {
		t.Fatalf("result = %+v", r)
	}
	absent(t, s.worker.ws, "forged-1", "forged-2", "forged-3")
}

// auditOf waits for the audit event of kind about call id of agent (for a
// decision, the one decided by who, when given).
func auditOf(t *testing.T, js jetstream.JetStream, agent, id, kind string, who ...string) events.AuditData {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, bus.StreamAudit, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AuditSubject(agent, ">")}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("no %s audit of %s: %v", kind, id, err)
		}
		var a events.AuditData
		if _, err := events.DecodeData(m.Headers(), m.Data(), &a); err != nil {
			t.Fatal(err)
		}
		if a.CallID == id && a.Kind == kind && (len(who) == 0 || strings.Join(a.DecidedBy, ",") == strings.Join(who, ",")) {
			return a
		}
	}
}

// TestApproveWithChangesFromTheCommandLine: `toolctl approvals approve ID
// --args-file F` runs the call with the file's arguments; a malformed file
// is refused before anything is sent.
func TestApproveWithChangesFromTheCommandLine(t *testing.T) {
	s := startEditStack(t)
	c := s.worker.client(t, "agent-edit")
	final := submitBash(t, c, "edit-cli", "rm -rf x")
	bad := filepath.Join(t.TempDir(), "bad.json")
	writeFile(t, bad, `{"command":"ls x", "command":"rm -rf x"}`)
	_, errOut, code := s.worker.toolctl(t, "approvals", "approve", "edit-cli", "--args-file", bad, "--approver", s.url, "--token", aliceToken)
	if code != 2 || !strings.Contains(errOut, "--args-file "+bad) || !strings.Contains(errOut, "appears twice") {
		t.Fatalf("malformed --args-file: code %d, stderr %s", code, errOut)
	}
	good := filepath.Join(t.TempDir(), "args.json")
	writeFile(t, good, "{\n  \"command\": \"ls x\"\n}\n")
	out, errOut, code := s.worker.toolctl(t, "approvals", "approve", "edit-cli", "--args-file", good, "--approver", s.url, "--token", aliceToken)
	if code != 0 || !strings.Contains(out, "edit-cli: approved") || !strings.Contains(out, "approved with changes") {
		t.Fatalf("approve --args-file: code %d\n%s\n%s", code, out, errOut)
	}
	if r := wait(t, final); r.Status != events.StatusOK || strings.TrimSpace(r.Output) != "inside" {
		t.Fatalf("result = %s %q, want the output of ls x", r.Status, r.Output)
	}
}
