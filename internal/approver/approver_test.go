package approver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

const tokenFile = `# identity token
alice alice-token-0123456789
bob   bob-token-0123456789ab
agent-7 agent-token-0123456789
AGENT_7 agentcase-token-0123456789
`

// stack is a real embedded NATS server, a worker-side Manager whose resume
// callback counts invocations, and the approver service over HTTP.
type stack struct {
	t            *testing.T
	ctx          context.Context
	nc           *nats.Conn
	cfg          Config
	stopApprover func()
	js           jetstream.JetStream
	mgr          *parking.Manager
	srv          *Server
	http         *httptest.Server
	mu           sync.Mutex
	resumed      map[string][]parking.Outcome
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

func newStack(t *testing.T, mod func(*Config)) *stack {
	t.Helper()
	ns := testenv.StartNATS(t, "")
	nc, js := ns.Connect(t)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs after cancel: cleanups run last first
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	st := &stack{t: t, js: js, resumed: map[string][]parking.Outcome{}}
	// The install's account: the worker trusts the approvers it issued.
	acct := trusttest.NewAccount(t)
	mgr, err := parking.NewManager(ctx, js, parking.Options{Name: "w1", TrustedAccounts: []string{acct.Public},
		SweepInterval: 20 * time.Millisecond, EditJudge: judgeEdit, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	st.mgr = mgr
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = mgr.Run(ctx, func(_ context.Context, p *parking.Parked, o parking.Outcome) error {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.resumed[p.CallID] = append(st.resumed[p.CallID], o)
			return nil
		})
	}()
	tokens, err := ParseTokens(strings.NewReader(tokenFile), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	creds := acct.User(t, "approver", trust.RoleApprover, 0)
	cfg := Config{Name: "test", Tokens: tokens, Key: creds.Key, UserJWT: creds.JWT, Logger: quiet(), DecisionWait: 10 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	st.nc, st.cfg, st.ctx = nc, cfg, ctx
	st.startApprover()
	return st
}

// startApprover starts the approver service (again) with st.cfg.
func (st *stack) startApprover() {
	st.t.Helper()
	srv, err := New(st.ctx, st.nc, st.cfg)
	if err != nil {
		st.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(st.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	hs := httptest.NewServer(srv.Handler())
	st.srv, st.http = srv, hs
	st.stopApprover = func() { hs.Close(); cancel(); <-done }
	st.t.Cleanup(st.stopApprover)
}

func (st *stack) resumes(id string) []parking.Outcome {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.resumed[id])
}

func (st *stack) park(id string, d policy.Decision, args string) *parking.Parked {
	st.t.Helper()
	p := &parking.Parked{CallID: id, Agent: "agent-7", SessionID: "sess-1", Tool: "bash", Arguments: json.RawMessage(args), Decision: d}
	if err := st.mgr.Park(context.Background(), p); err != nil {
		st.t.Fatal(err)
	}
	return p
}

// do sends an API request with token (none when empty) and decodes JSON.
func (st *stack) do(method, path, token, body string, out any) int {
	st.t.Helper()
	req, _ := http.NewRequest(method, st.http.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		st.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			st.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var ask = policy.Decision{Action: policy.Ask, Rule: "tools.bash.ask", Reason: "pushes need a person"}

const (
	alice = "alice-token-0123456789"
	bob   = "bob-token-0123456789ab"
	agent = "agent-token-0123456789"
)

func TestAPIStatuses(t *testing.T) {
	st := newStack(t, nil)
	p := st.park("call-1", ask, `{"command":"git push origin main"}`)

	tests := []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no token", "GET", "/api/approvals", "", "", 401},
		{"wrong token", "GET", "/api/approvals", "nope-nope-nope-nope", "", 401},
		{"decide without token", "POST", "/api/approvals/call-1/approve", "", `{}`, 401},
		{"unknown call", "GET", "/api/approvals/nope", alice, "", 404},
		{"approve unknown call", "POST", "/api/approvals/nope/approve", alice, `{}`, 404},
		{"reject without reason", "POST", "/api/approvals/call-1/reject", alice, `{"reason":"  "}`, 400},
		{"unknown field", "POST", "/api/approvals/call-1/approve", alice, `{"coment":"typo"}`, 400},
		{"answer to an approval", "POST", "/api/approvals/call-1/answer", alice, `{"answer":"yes"}`, 400},
		{"unknown verb", "POST", "/api/approvals/call-1/maybe", alice, `{}`, 404},
		{"agent approves its own call", "POST", "/api/approvals/call-1/approve", agent, `{}`, 403},
		{"token named as the agent in another spelling", "POST", "/api/approvals/call-1/approve", "agentcase-token-0123456789", `{}`, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body map[string]any
			if got := st.do(tt.method, tt.path, tt.token, tt.body, &body); got != tt.want {
				t.Fatalf("%s %s = %d %v, want %d", tt.method, tt.path, got, body, tt.want)
			}
			if body["error"] == "" || body["error"] == nil {
				t.Fatalf("error body does not say what is wrong: %v", body)
			}
		})
	}

	var list []View
	if code := st.do("GET", "/api/approvals", alice, "", &list); code != 200 || len(list) != 1 {
		t.Fatalf("list = %d %+v", code, list)
	}
	v := list[0]
	if v.CallID != "call-1" || v.Agent != "agent-7" || v.Tool != "bash" || v.Rule != ask.Rule || v.Reason != ask.Reason ||
		v.ArgsSHA256 != p.ArgsSHA256 || string(v.Arguments) != `{"command":"git push origin main"}` ||
		v.RequestedAt.IsZero() || !v.ExpiresAt.After(v.RequestedAt) || v.Status != "pending" {
		t.Fatalf("listed view = %+v", v)
	}

	var res Result
	if code := st.do("POST", "/api/approvals/call-1/approve", alice, `{"comment":"ok"}`, &res); code != 200 || res.Status != "approved" {
		t.Fatalf("approve = %d %+v", code, res)
	}
	eventually(t, "resumed", func() bool { return len(st.resumes("call-1")) == 1 })
	for _, again := range []struct{ path, body string }{
		{"/api/approvals/call-1/approve", `{}`}, {"/api/approvals/call-1/reject", `{"reason":"late"}`},
	} {
		var e map[string]string
		if code := st.do("POST", again.path, bob, again.body, &e); code != 409 {
			t.Fatalf("decision on a decided call = %d %v, want 409", code, e)
		}
	}
	var shown View
	if code := st.do("GET", "/api/approvals/call-1", alice, "", &shown); code != 200 || shown.Status != "approved" ||
		shown.Outcome == nil || !slices.Equal(shown.Outcome.Approvers, []string{"alice"}) {
		t.Fatalf("show decided = %d %+v", code, shown)
	}
	if o := st.resumes("call-1"); len(o) != 1 || o[0].Status != approval.Approved || o[0].Comment != "alice: ok" {
		t.Fatalf("resumes = %+v", o)
	}
}

func TestApproverRestartKeepsPendingSessionsAndNotifications(t *testing.T) {
	st := newStack(t, nil)
	st.park("call-before", ask, `{"command":"git push"}`)

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(st.http.URL+"/login", url.Values{"token": {alice}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := jar.Cookies(mustURL(st.http.URL))
	if len(cookies) != 1 {
		t.Fatalf("cookies after login: %v", cookies)
	}

	// The approver goes down; a call is parked meanwhile; it comes back
	// with a webhook configured.
	st.stopApprover()
	st.park("call-while-down", ask, `{"command":"git tag v2"}`)
	var mu sync.Mutex
	var notified []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n Notice
		_ = json.NewDecoder(r.Body).Decode(&n)
		mu.Lock()
		notified = append(notified, n.Request.CallID)
		mu.Unlock()
	}))
	defer hook.Close()
	st.cfg.Webhooks = []Webhook{{URL: hook.URL}}
	st.startApprover()

	eventually(t, "the request parked while the approver was down is notified", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(notified, "call-while-down")
	})
	var list []View
	if code := st.do("GET", "/api/approvals", alice, "", &list); code != 200 || len(list) != 2 {
		t.Fatalf("pending after restart = %d %+v", code, list)
	}
	// The session cookie issued before the restart still works.
	req, _ := http.NewRequest("GET", st.http.URL+"/api/approvals/call-before", nil)
	req.AddCookie(cookies[0])
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("session from before the restart: %d", resp.StatusCode)
	}
	var res Result
	if code := st.do("POST", "/api/approvals/call-while-down/approve", alice, `{}`, &res); code != 200 || res.Status != "approved" {
		t.Fatalf("approve after restart = %d %+v", code, res)
	}
	eventually(t, "resumed", func() bool { return len(st.resumes("call-while-down")) == 1 })
}

func TestThresholdThroughAPI(t *testing.T) {
	st := newStack(t, nil)
	d := ask
	d.Approvers = 2
	st.park("call-2", d, `{"command":"terraform apply"}`)
	var res Result
	if code := st.do("POST", "/api/approvals/call-2/approve", alice, `{}`, &res); code != 200 || res.Status != "pending" || !slices.Equal(res.ApprovedBy, []string{"alice"}) {
		t.Fatalf("first approval = %d %+v", code, res)
	}
	if code := st.do("POST", "/api/approvals/call-2/approve", alice, `{}`, nil); code != 409 {
		t.Fatalf("same person again = %d, want 409", code)
	}
	if code := st.do("POST", "/api/approvals/call-2/approve", bob, `{}`, &res); code != 200 || res.Status != "approved" {
		t.Fatalf("second approval = %d %+v", code, res)
	}
	eventually(t, "resumed", func() bool { return len(st.resumes("call-2")) == 1 })
}

func TestRejectAnswerAndAlwaysAllowThroughAPI(t *testing.T) {
	st := newStack(t, nil)
	st.park("call-r", ask, `{"command":"rm -rf build"}`)
	var res Result
	if code := st.do("POST", "/api/approvals/call-r/reject", alice, `{"reason":"not now"}`, &res); code != 200 || res.Status != "rejected" {
		t.Fatalf("reject = %d %+v", code, res)
	}
	eventually(t, "rejected resume", func() bool { o := st.resumes("call-r"); return len(o) == 1 && o[0].Reason == "not now" })

	q := &parking.Parked{CallID: "q-1", Agent: "agent-7", Tool: approval.ClarifyName, Arguments: json.RawMessage(`{"question":"Which branch?","choices":["main","dev"]}`),
		Decision: policy.Decision{Action: policy.Ask, Rule: approval.ClarifyRule, Reason: "Which branch?"},
		Question: &approval.Question{Text: "Which branch?", Choices: []string{"main", "dev"}}}
	if err := st.mgr.Park(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if code := st.do("POST", "/api/approvals/q-1/approve", alice, `{}`, nil); code != 400 {
		t.Fatalf("approve a question = %d, want 400", code)
	}
	if code := st.do("POST", "/api/approvals/q-1/answer", alice, `{"answer":"prod"}`, nil); code != 400 {
		t.Fatalf("answer outside the choices = %d, want 400", code)
	}
	if code := st.do("POST", "/api/approvals/q-1/answer", alice, `{"answer":"dev"}`, &res); code != 200 || res.Status != "answered" {
		t.Fatalf("answer = %d %+v", code, res)
	}
	eventually(t, "answered resume", func() bool { o := st.resumes("q-1"); return len(o) == 1 && o[0].Answer == "dev" })

	st.park("call-aa", ask, `{"command":"git push origin main"}`)
	if code := st.do("POST", "/api/approvals/call-aa/approve", alice, `{"always_allow":{"command_prefix":"rm"}}`, nil); code != 400 {
		t.Fatalf("amendment wider than the call = %d, want 400", code)
	}
	if code := st.do("POST", "/api/approvals/call-aa/approve", alice, `{"always_allow":true}`, &res); code != 200 || res.Amendment == nil {
		t.Fatalf("approve and always allow = %d %+v", code, res)
	}
	kv, _ := st.js.KeyValue(context.Background(), bus.BucketPolicy)
	eventually(t, "amendment stored", func() bool {
		as, err := parking.ListAmendments(context.Background(), kv)
		return err == nil && len(as) == 1 && as[0].CommandPrefix == "git push origin main" && as[0].Agent == "agent-7" && as[0].ID == res.Amendment.ID
	})
}

func TestBrowserSessionNeedsCSRFToken(t *testing.T) {
	st := newStack(t, nil)
	st.park("call-b", ask, `{"command":"git push"}`)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}

	resp, err := c.PostForm(st.http.URL+"/login", url.Values{"token": {"wrong-token-wrong-token"}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "not valid") || len(jar.Cookies(mustURL(st.http.URL))) != 0 {
		t.Fatalf("bad login was not refused")
	}
	resp, err = c.PostForm(st.http.URL+"/login", url.Values{"token": {alice}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := between(string(page), `name="csrf-token" content="`, `"`)
	if csrf == "" || !strings.Contains(string(page), ">alice<") {
		t.Fatalf("logged-in page has no CSRF token or identity:\n%s", page)
	}
	post := func(h map[string]string) int {
		req, _ := http.NewRequest("POST", st.http.URL+"/api/approvals/call-b/approve", strings.NewReader(`{}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(nil); code != 403 {
		t.Fatalf("cookie POST without CSRF token = %d, want 403", code)
	}
	if code := post(map[string]string{csrfHeader: csrf, "Sec-Fetch-Site": "cross-site"}); code != 403 {
		t.Fatalf("cross-site POST = %d, want 403", code)
	}
	if code := post(map[string]string{csrfHeader: "forged"}); code != 403 {
		t.Fatalf("wrong CSRF token = %d, want 403", code)
	}
	if code := post(map[string]string{csrfHeader: csrf, "Sec-Fetch-Site": "same-origin"}); code != 200 {
		t.Fatalf("same-origin POST with token = %d, want 200", code)
	}
	eventually(t, "resumed", func() bool { return len(st.resumes("call-b")) == 1 })
}

func TestEventsStreamSnapshots(t *testing.T) {
	st := newStack(t, nil)
	req, _ := http.NewRequest("GET", st.http.URL+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+bob)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	snaps := make(chan Snapshot, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var s Snapshot
				if json.Unmarshal([]byte(data), &s) == nil {
					snaps <- s
				}
			}
		}
	}()
	st.park("call-sse", ask, `{"command":"make deploy"}`)
	timeout := time.After(15 * time.Second)
	for {
		select {
		case s := <-snaps:
			if s.Identity != "bob" {
				t.Fatalf("snapshot identity %q", s.Identity)
			}
			if len(s.Pending) == 1 && s.Pending[0].CallID == "call-sse" {
				return
			}
		case <-timeout:
			t.Fatal("no snapshot with the parked call")
		}
	}
}

func TestSlackInteractivity(t *testing.T) {
	const secret = "slack-secret-for-tests"
	st := newStack(t, func(c *Config) {
		c.SlackSigningSecret = secret
		c.SlackUsers = map[string]string{"U-ALICE": "alice"}
	})
	st.park("call-s", ask, `{"command":"git push"}`)
	send := func(user, action string, ts time.Time, sign bool) string {
		payload := fmt.Sprintf(`{"type":"block_actions","user":{"id":%q,"username":"x"},"actions":[{"action_id":%q,"value":"call-s"}]}`, user, action)
		body := "payload=" + url.QueryEscape(payload)
		req, _ := http.NewRequest("POST", st.http.URL+"/slack/actions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		tss := fmt.Sprint(ts.Unix())
		req.Header.Set("X-Slack-Request-Timestamp", tss)
		if sign {
			req.Header.Set("X-Slack-Signature", SlackSignature(secret, tss, []byte(body)))
		} else {
			req.Header.Set("X-Slack-Signature", SlackSignature("other", tss, []byte(body)))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	if got := send("U-ALICE", SlackApprove, time.Now(), false); !strings.HasPrefix(got, "401") {
		t.Fatalf("bad signature = %s", got)
	}
	if got := send("U-ALICE", SlackApprove, time.Now().Add(-6*time.Minute), true); !strings.HasPrefix(got, "401") {
		t.Fatalf("replayed request = %s", got)
	}
	if got := send("U-MALLORY", SlackApprove, time.Now(), true); !strings.Contains(got, "not an approver") {
		t.Fatalf("unmapped user = %s", got)
	}
	if n := len(st.resumes("call-s")); n != 0 {
		t.Fatal("a refused Slack request decided the call")
	}
	if got := send("U-ALICE", SlackApprove, time.Now(), true); !strings.Contains(got, "approved by alice") {
		t.Fatalf("approve = %s", got)
	}
	eventually(t, "resumed", func() bool { return len(st.resumes("call-s")) == 1 })
}

func TestWebhooksNotifyNewRequestsWithoutBlocking(t *testing.T) {
	var mu sync.Mutex
	var got []Notice
	const secret = "hook-secret"
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(HeaderSignature) != SignWebhook(secret, r.Header.Get(HeaderTimestamp), body) {
			w.WriteHeader(401)
			return
		}
		var n Notice
		_ = json.Unmarshal(body, &n)
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
	}))
	defer good.Close()
	release := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer stuck.Close()
	defer close(release)
	var slackBody []byte
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		slackBody = b
		mu.Unlock()
	}))
	defer slack.Close()

	st := newStack(t, func(c *Config) {
		c.PublicURL = "https://approvals.example"
		c.Webhooks = []Webhook{{URL: stuck.URL}, {URL: good.URL, Secret: secret}, {URL: slack.URL, Format: FormatSlack}}
		c.Notifier = &Notifier{BaseDelay: time.Millisecond}
	})
	st.park("call-w1", ask, `{"command":"git push"}`)
	st.park("call-w2", ask, `{"command":"git tag v1"}`)
	eventually(t, "both requests notified while another receiver hangs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	ids := []string{got[0].Request.CallID, got[1].Request.CallID}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"call-w1", "call-w2"}) || got[0].API == "" || got[0].Request.ArgsSHA256 == "" {
		t.Fatalf("notices = %+v", got)
	}
	if !strings.Contains(string(slackBody), SlackApprove) || !strings.Contains(string(slackBody), `"blocks"`) {
		t.Fatalf("slack message = %s", slackBody)
	}
}

func TestWebhookRetriesAFailingReceiver(t *testing.T) {
	tests := []struct {
		name         string
		failures     int
		status       int
		wantAttempts int
		wantErr      bool
	}{
		{"succeeds first time", 0, 500, 1, false},
		{"fails three times then succeeds", 3, 503, 4, false},
		{"rate limited twice", 2, 429, 3, false},
		{"always failing gives up", 100, 500, 5, true},
		{"client error is not retried", 100, 400, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			attempts := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				attempts++
				n := attempts
				mu.Unlock()
				if n <= tt.failures {
					w.WriteHeader(tt.status)
				}
			}))
			defer srv.Close()
			n := &Notifier{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
			made, err := n.Deliver(context.Background(), Webhook{URL: srv.URL}, []byte(`{}`))
			mu.Lock()
			defer mu.Unlock()
			if made != tt.wantAttempts || attempts != tt.wantAttempts {
				t.Fatalf("attempts: reported %d, received %d, want %d", made, attempts, tt.wantAttempts)
			}
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrDelivery)) {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestSlackSignatureAgainstPublishedExample(t *testing.T) {
	// Slack's documented example ("Verifying requests from Slack").
	const (
		secret = "8f742231b10e8888abcd99yyyzzz85a5"
		ts     = "1531420618"
		body   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
		want   = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
	)
	if got := SlackSignature(secret, ts, []byte(body)); got != want {
		t.Fatalf("SlackSignature = %s, want %s", got, want)
	}
	at := time.Unix(1531420618, 0)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", want)
	tests := []struct {
		name   string
		now    time.Time
		body   string
		secret string
		want   error
	}{
		{"valid", at.Add(30 * time.Second), body, secret, nil},
		{"edge of the window", at.Add(5 * time.Minute), body, secret, nil},
		{"replayed after 5 minutes", at.Add(5*time.Minute + time.Second), body, secret, ErrSlackStale},
		{"from the future", at.Add(-6 * time.Minute), body, secret, ErrSlackStale},
		{"body changed", at, body + "&x=1", secret, ErrSlackSignature},
		{"other secret", at, body, "other", ErrSlackSignature},
		{"no secret configured", at, body, "", ErrSlackSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifySlack(tt.secret, h, []byte(tt.body), tt.now)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("VerifySlack = %v, want %v", err, tt.want)
			}
		})
	}
	noTS := http.Header{"X-Slack-Signature": {want}}
	if err := VerifySlack(secret, noTS, []byte(body), at); !errors.Is(err, ErrSlackStale) {
		t.Fatalf("missing timestamp = %v", err)
	}
}

func TestTokensAndKey(t *testing.T) {
	tests := []struct {
		name, file, where string
	}{
		{"three fields", "alice tok-0123456789abcdef extra\n", "tokens:1"},
		{"short token", "# c\nalice short\n", "tokens:2"},
		{"shared token", "a 0123456789abcdef\nb 0123456789abcdef\n", "tokens:2"},
		{"empty", "# nothing\n", "no tokens"},
		{"identity without a letter or digit", "--- 0123456789abcdef\n", "tokens:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTokens(strings.NewReader(tt.file), "tokens")
			if !errors.Is(err, ErrBadTokenFile) || !strings.Contains(err.Error(), tt.where) {
				t.Fatalf("ParseTokens = %v, want ErrBadTokenFile at %s", err, tt.where)
			}
		})
	}
	tok, _ := ParseTokens(strings.NewReader(tokenFile), "tokens")
	if id, ok := tok.Identity(bob); !ok || id != "bob" {
		t.Fatalf("Identity(bob) = %q %v", id, ok)
	}
	if _, ok := tok.Identity(bob + "x"); ok {
		t.Fatal("a wrong token authenticated")
	}

	dir := filepath.Join(t.TempDir(), "data")
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := k1.PublicKey()
	p2, _ := k2.PublicKey()
	if p1 != p2 {
		t.Fatal("the key changed between starts")
	}
	fi, _ := os.Stat(filepath.Join(dir, "approver.nk"))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	tf := filepath.Join(dir, "tokens")
	if created, err := EnsureTokenFile(tf, "admin"); err != nil || !created {
		t.Fatalf("EnsureTokenFile = %v %v", created, err)
	}
	if created, _ := EnsureTokenFile(tf, "admin"); created {
		t.Fatal("EnsureTokenFile overwrote a token file")
	}
	if _, err := LoadTokens(tf); err != nil {
		t.Fatalf("generated token file does not load: %v", err)
	}
}

func mustURL(s string) *url.URL { u, _ := url.Parse(s); return u }

func between(s, a, b string) string {
	_, rest, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, b)
	return v
}

// TestWorkerRefusalStatus checks that a worker's refusal of a published
// decision is matched by its code, not its text: already decided and
// duplicate approver are 409, any other refusal 422, even one whose reason
// text reads like "already decided".
func TestWorkerRefusalStatus(t *testing.T) {
	st := newStack(t, nil)
	for _, tt := range []struct {
		name string
		r    *parking.RefusalError
		is   error
		code int
	}{
		{"already decided", &parking.RefusalError{Code: parking.RefusalAlreadyDecided, Reason: "call already decided: call c is approved"}, ErrDecided, 409},
		{"duplicate approver", &parking.RefusalError{Code: parking.RefusalDuplicateApprover, Reason: "approver already approved this call"}, ErrDecided, 409},
		{"hash mismatch", &parking.RefusalError{Reason: "decision is for other arguments"}, ErrRefused, 422},
		{"uncoded text alike", &parking.RefusalError{Reason: "call already decided (says the reason)"}, ErrRefused, 422},
	} {
		t.Run(tt.name, func(t *testing.T) {
			refused := make(chan *parking.RefusalError, 1)
			refused <- tt.r
			_, err := st.srv.await(st.ctx, &approval.Decision{CallID: "c", Signature: "s"}, refused)
			if !errors.Is(err, tt.is) || !errors.Is(err, parking.ErrRefused) {
				t.Fatalf("await = %v, want %v wrapping the refusal", err, tt.is)
			}
			rec := httptest.NewRecorder()
			st.srv.fail(rec, err)
			if rec.Code != tt.code {
				t.Fatalf("status = %d, want %d", rec.Code, tt.code)
			}
		})
	}
}
