package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/policy"
)

// judgeEdit stands for the worker's pipeline: it denies force pushes.
func judgeEdit(_ context.Context, _ *parking.Parked, args json.RawMessage) error {
	if strings.Contains(string(args), "--force") {
		return errors.New("the policy refuses the edited call: deny by policy: force push (rule tools.run_shell.blacklist[0])")
	}
	return nil
}

func TestApproveWithChangesThroughAPI(t *testing.T) {
	st := newStack(t, nil)
	st.park("e-1", ask, `{"command":"git push origin main"}`)
	var e struct {
		Error string `json:"error"`
	}
	tests := []struct {
		name, verb, body string
		code             int
		says             string
	}{
		{"not an object", "approve", `{"arguments":"git status"}`, 400, "JSON object"},
		{"repeated key", "approve", `{"arguments":{"command":"a","command":"b"}}`, 400, "appears twice"},
		{"with always allow", "approve", `{"arguments":{"command":"git status"},"always_allow":true}`, 400, "cannot also always allow"},
		{"on a reject", "reject", `{"reason":"no","arguments":{"command":"git status"}}`, 400, "only an approval"},
		{"denied by the policy", "approve", `{"arguments":{"command":"git push --force origin main"}}`, 422, "force push"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code := st.do("POST", "/api/approvals/e-1/"+tt.verb, alice, tt.body, &e); code != tt.code || !strings.Contains(e.Error, tt.says) {
				t.Fatalf("%s = %d %q, want %d saying %q", tt.body, code, e.Error, tt.code, tt.says)
			}
		})
	}
	if n := len(st.resumes("e-1")); n != 0 {
		t.Fatal("a refused edit decided the call")
	}
	var res Result
	if code := st.do("POST", "/api/approvals/e-1/approve", alice, `{"arguments":{"command":"git status"}}`, &res); code != 200 || res.Status != "approved" {
		t.Fatalf("approve with changes = %d %+v", code, res)
	}
	eventually(t, "resumed", func() bool { return len(st.resumes("e-1")) == 1 })
	if o := st.resumes("e-1")[0]; string(o.EditedArguments) != `{"command":"git status"}` || o.EditedArgsSHA256 != res.EditedArgsSHA256 {
		t.Fatalf("outcome = %+v", o)
	}
	// The same arguments as parked are no change.
	st.park("e-2", ask, `{"command":"git push origin main"}`)
	res = Result{}
	if code := st.do("POST", "/api/approvals/e-2/approve", alice, `{"arguments":{ "command" : "git push origin main" }}`, &res); code != 200 || res.EditedArgsSHA256 != "" {
		t.Fatalf("approve with the parked arguments = %d %+v", code, res)
	}
	// A question has no arguments to change.
	q := &parking.Parked{CallID: "e-q", Agent: "agent-7", Tool: approval.ClarifyName, Arguments: json.RawMessage(`{"question":"Which?"}`),
		Decision: policy.Decision{Action: policy.Ask, Rule: approval.ClarifyRule}, Question: &approval.Question{Text: "Which?"}}
	if err := st.mgr.Park(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if code := st.do("POST", "/api/approvals/e-q/approve", alice, `{"arguments":{"question":"other"}}`, &e); code != 400 {
		t.Fatalf("edit a question = %d %q", code, e.Error)
	}
}

// TestSlackApproveWithChanges: the Slack message carries the arguments in
// an input block with an "Approve with changes" button; the click's
// block_actions payload (Slack's format: the message's input values in
// state.values) approves the call with what the input held.
func TestSlackApproveWithChanges(t *testing.T) {
	const secret = "slack-secret-for-tests"
	st := newStack(t, func(c *Config) {
		c.SlackSigningSecret = secret
		c.SlackUsers = map[string]string{"U-ALICE": "alice"}
	})
	p := st.park("call-se", ask, `{"command":"git push origin main"}`)

	msg, _ := json.Marshal(SlackMessage(p.Request(), ""))
	var m struct {
		Blocks []struct {
			Type    string `json:"type"`
			BlockID string `json:"block_id"`
			Element struct {
				Type         string `json:"type"`
				ActionID     string `json:"action_id"`
				InitialValue string `json:"initial_value"`
			} `json:"element"`
			Elements []struct {
				ActionID string `json:"action_id"`
				Value    string `json:"value"`
			} `json:"elements"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatal(err)
	}
	var input, button bool
	for _, b := range m.Blocks {
		if b.Type == "input" && b.BlockID == SlackArgsBlock && b.Element.Type == "plain_text_input" && b.Element.ActionID == SlackArgsInput &&
			strings.Contains(b.Element.InitialValue, `"command": "git push origin main"`) {
			input = true
		}
		for _, el := range b.Elements {
			button = button || (el.ActionID == SlackApproveEdit && el.Value == "call-se")
		}
	}
	if !input || !button {
		t.Fatalf("Slack message lacks the arguments input (%v) or the button (%v): %s", input, button, msg)
	}

	send := func(value string) string {
		state := fmt.Sprintf(`{"values":{%q:{%q:{"type":"plain_text_input","value":%q}}}}`, SlackArgsBlock, SlackArgsInput, value)
		payload := fmt.Sprintf(`{"type":"block_actions","user":{"id":"U-ALICE","username":"alice"},"container":{"type":"message"},`+
			`"actions":[{"type":"button","block_id":"toolgate_call-se","action_id":%q,"value":"call-se","action_ts":"1"}],"state":%s}`, SlackApproveEdit, state)
		body := "payload=" + url.QueryEscape(payload)
		req, _ := http.NewRequest("POST", st.http.URL+"/slack/actions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		ts := fmt.Sprint(time.Now().Unix())
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", SlackSignature(secret, ts, []byte(body)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := send(`{"command": "git status"`); !strings.Contains(got, "arguments") {
		t.Fatalf("broken JSON = %s", got)
	}
	if got := send(`{"command": "git push --force origin main"}`); !strings.Contains(got, "force push") {
		t.Fatalf("denied edit = %s", got)
	}
	if n := len(st.resumes("call-se")); n != 0 {
		t.Fatal("a refused Slack edit decided the call")
	}
	if got := send("{\n  \"command\": \"git status\"\n}"); !strings.Contains(got, "approved by alice") {
		t.Fatalf("approve with changes = %s", got)
	}
	eventually(t, "resumed", func() bool { return len(st.resumes("call-se")) == 1 })
	if o := st.resumes("call-se")[0]; string(o.EditedArguments) != `{"command":"git status"}` {
		t.Fatalf("outcome = %+v", o)
	}
}
