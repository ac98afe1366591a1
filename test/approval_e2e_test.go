package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

// askWrites is a policy under which writing a file needs a person.
const askWrites = teststack.AskWrites

// aliceToken is alice's login token at the approver services the tests
// start.
const aliceToken = teststack.AliceToken

// approvalStack is a worker process with a policy that asks before writes,
// and an approver service on the same bus, as a user runs them.
type approvalStack struct {
	worker *process
	url    string // approver HTTP base URL
	// acct is the install's account; approver holds the approver's
	// credentials it issued.
	acct     *trusttest.Account
	approver trust.Signer
}

func startApprovalStack(t *testing.T) *approvalStack {
	t.Helper()
	return startApprovalStackWith(t, askWrites)
}

// startApprovalStackWith starts a worker following policyDoc, trusting the
// approvers of its install (the default), and an approver service holding
// that install's approver credentials, as an install sets them up.
func startApprovalStackWith(t *testing.T, policyDoc string) *approvalStack {
	t.Helper()
	s := teststack.StartApprovalStack(t, policyDoc)
	return &approvalStack{worker: asProcess(s.Worker), url: s.URL, acct: installAccount(t), approver: s.Approver}
}

// submit publishes a write call and waits for its pending result.
func (s *approvalStack) submit(t *testing.T, c *client.Client, id, path, content string) <-chan *events.ResultData {
	t.Helper()
	return teststack.SubmitWrite(t, c, id, path, content)
}

func (s *approvalStack) api(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode
}

// results counts the results stored for a call (pending and final).
func results(t *testing.T, natsURL, agent, id string) uint64 {
	t.Helper()
	nc, _, err := identity.Dial(natsURL, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), bus.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(events.ResultSubject(agent, id)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestApprovalEndToEnd(t *testing.T) {
	s := startApprovalStack(t)
	c := s.worker.client(t, "agent-e2e")

	final := s.submit(t, c, "e2e-approve", "approved.txt", "written after approval\n")
	if _, err := os.Stat(filepath.Join(s.worker.ws, "approved.txt")); err == nil {
		t.Fatal("the file was written before anyone approved")
	}
	var list []approver.View
	if code := s.api(t, "GET", "/api/approvals", "", &list); code != 200 || len(list) != 1 {
		t.Fatalf("pending list = %d %+v", code, list)
	}
	v := list[0]
	if v.CallID != "e2e-approve" || v.Agent != "agent-e2e" || v.Tool != "write" || !strings.Contains(v.Diff, "+written after approval") {
		t.Fatalf("pending call = %+v", v)
	}
	var res approver.Result
	if code := s.api(t, "POST", "/api/approvals/e2e-approve/approve", `{"comment":"fine"}`, &res); code != 200 || res.Status != "approved" {
		t.Fatalf("approve = %d %+v", code, res)
	}
	r := wait(t, final)
	if r.Status != events.StatusOK || r.Decision == nil || strings.Join(r.Decision.Approvers, ",") != "alice" {
		t.Fatalf("final result = %+v", r)
	}
	b, err := os.ReadFile(filepath.Join(s.worker.ws, "approved.txt"))
	if err != nil || string(b) != "written after approval\n" {
		t.Fatalf("file after approval: %q %v", b, err)
	}
	if code := s.api(t, "POST", "/api/approvals/e2e-approve/approve", `{}`, nil); code != 409 {
		t.Fatalf("second approval = %d, want 409", code)
	}
	if n := results(t, s.worker.url, "agent-e2e", "e2e-approve"); n != 2 {
		t.Fatalf("%d results stored for the call, want 2 (pending, then one execution)", n)
	}

	final = s.submit(t, c, "e2e-reject", "rejected.txt", "never\n")
	if code := s.api(t, "POST", "/api/approvals/e2e-reject/reject", `{}`, nil); code != 400 {
		t.Fatalf("reject without reason = %d, want 400", code)
	}
	if code := s.api(t, "POST", "/api/approvals/e2e-reject/reject", `{"reason":"wrong file"}`, &res); code != 200 || res.Status != "rejected" {
		t.Fatalf("reject = %d %+v", code, res)
	}
	r = wait(t, final)
	if r.Status != events.StatusRejected || !strings.Contains(r.Output, "wrong file") {
		t.Fatalf("rejected result = %+v", r)
	}
	if _, err := os.Stat(filepath.Join(s.worker.ws, "rejected.txt")); err == nil {
		t.Fatal("a rejected write ran")
	}
}

// TestParkedWriteShowsTheRealChange: a person approving an overwrite sees
// the diff against the file as it is, not the whole content as new.
func TestParkedWriteShowsTheRealChange(t *testing.T) {
	s := startApprovalStack(t)
	writeFile(t, filepath.Join(s.worker.ws, "config.txt"), "alpha\nbeta\ngamma\n")
	c := s.worker.client(t, "agent-diff")
	final := s.submit(t, c, "e2e-diff", "config.txt", "alpha\nBETA\ngamma\n")
	var v approver.View
	if code := s.api(t, "GET", "/api/approvals/e2e-diff", "", &v); code != 200 {
		t.Fatalf("get = %d", code)
	}
	if !strings.Contains(v.Diff, "-beta") || !strings.Contains(v.Diff, "+BETA") || strings.Contains(v.Diff, "+alpha") {
		t.Fatalf("diff shown to the approver:\n%s", v.Diff)
	}
	if code := s.api(t, "POST", "/api/approvals/e2e-diff/reject", `{"reason":"keep it"}`, nil); code != 200 {
		t.Fatalf("reject = %d", code)
	}
	if r := wait(t, final); r.Status != events.StatusRejected {
		t.Fatalf("final = %+v", r)
	}
}
