package approver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// Webhook formats.
const (
	// FormatJSON posts the approval request as generic JSON, signed with
	// HMAC-SHA256 in the X-Toolgate-Signature header.
	FormatJSON = "json"
	// FormatSlack posts a Slack-compatible message with Approve and Reject
	// buttons (an incoming-webhook URL).
	FormatSlack = "slack"
)

// Webhook is one outgoing notification target.
type Webhook struct {
	// URL receives a POST per approval request.
	URL string `json:"url"`
	// Format is "json" (default) or "slack".
	Format string `json:"format,omitempty"`
	// Secret signs generic JSON deliveries (HMAC-SHA256); empty sends
	// them unsigned.
	Secret string `json:"-"`
}

// Headers of generic JSON deliveries.
const (
	HeaderSignature = "X-Toolgate-Signature"
	HeaderTimestamp = "X-Toolgate-Timestamp"
)

// SignWebhook is the X-Toolgate-Signature value of a delivery:
// "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)).
func SignWebhook(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Notice is the generic JSON body of a delivery.
type Notice struct {
	// Type is dev.toolgate.approval.requested.v1.
	Type string `json:"type"`
	// Request is the approval request.
	Request approval.Request `json:"request"`
	// Page links to the approver's web page.
	Page string `json:"page,omitempty"`
	// API is the call's JSON API URL (POST .../approve, .../reject).
	API string `json:"api,omitempty"`
}

// Notifier delivers notifications with retries and backoff. Each delivery
// runs on its own, so a slow or failing receiver never holds up another.
type Notifier struct {
	// Client sends the requests; default a client with a 10s timeout.
	Client *http.Client
	// MaxAttempts bounds the tries of one delivery; default 6.
	MaxAttempts int
	// BaseDelay is the first retry's delay, doubled each time; default 500ms.
	BaseDelay time.Duration
	// MaxDelay caps the delay; default 30s.
	MaxDelay time.Duration
	// Logger receives delivery failures.
	Logger *slog.Logger
}

// ErrDelivery reports a delivery that failed for good.
var ErrDelivery = errors.New("webhook delivery failed")

// Deliver posts body to hook, retrying network errors, 429 and 5xx with
// exponential backoff and jitter (honouring Retry-After up to MaxDelay),
// and returns the number of attempts made.
func (n *Notifier) Deliver(ctx context.Context, hook Webhook, body []byte) (int, error) {
	client, attempts, base, maxDelay := n.Client, n.MaxAttempts, n.BaseDelay, n.MaxDelay
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if attempts <= 0 {
		attempts = 6
	}
	if base <= 0 {
		base = 500 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 30 * time.Second
	}
	var last error
	i := 1
	for ; ; i++ {
		retryAfter, err := n.post(ctx, client, hook, body)
		if err == nil {
			return i, nil
		}
		last = err
		var perm permanent
		if errors.As(err, &perm) || i >= attempts {
			break
		}
		d := min(base<<min(i-1, 20), maxDelay)
		d = d/2 + rand.N(d/2+1) // jitter: [d/2, d]
		if retryAfter > 0 {
			d = min(max(d, retryAfter), maxDelay)
		}
		select {
		case <-ctx.Done():
			return i, fmt.Errorf("%w: %s: %v (%v)", ErrDelivery, redact(hook.URL), ctx.Err(), last)
		case <-time.After(d):
		}
	}
	return i, fmt.Errorf("%w: %s: %v", ErrDelivery, redact(hook.URL), last)
}

type permanent struct{ error }

func (n *Notifier) post(ctx context.Context, client *http.Client, hook Webhook, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(body))
	if err != nil {
		return 0, permanent{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolgate-approver")
	if hook.Format != FormatSlack && hook.Secret != "" {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req.Header.Set(HeaderTimestamp, ts)
		req.Header.Set(HeaderSignature, SignWebhook(hook.Secret, ts, body))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return 0, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		var ra time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			ra = time.Duration(s) * time.Second
		}
		return ra, fmt.Errorf("status %d", resp.StatusCode)
	default:
		return 0, permanent{fmt.Errorf("status %d", resp.StatusCode)}
	}
}

// redact drops the path of a webhook URL (it often holds the secret).
func redact(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
			return u[:i+3+j] + "/…"
		}
	}
	return u
}

// Body renders the delivery body of req for hook's format. page is the
// approver's public URL.
func Body(hook Webhook, req approval.Request, page string) ([]byte, error) {
	page = strings.TrimSuffix(page, "/")
	if hook.Format == FormatSlack {
		return json.Marshal(SlackMessage(req, page))
	}
	n := Notice{Type: events.TypeApprovalRequested, Request: req}
	if page != "" {
		n.Page, n.API = page+"/", page+"/api/approvals/"+req.CallID
	}
	return json.Marshal(n)
}

// Slack action ids of the message buttons.
const (
	SlackApprove = "toolgate_approve"
	SlackReject  = "toolgate_reject"
)

// SlackMessage is a Block Kit message for req with Approve and Reject
// buttons whose value is the call id.
func SlackMessage(req approval.Request, page string) map[string]any {
	args := string(req.Arguments)
	if len(args) > 2500 {
		args = args[:2500] + "…"
	}
	what := "approval"
	if req.Question != nil {
		what = "question"
	}
	text := fmt.Sprintf("*%s* wants to run *%s* (call `%s`)", req.Agent, req.Tool, req.CallID)
	if req.Question != nil {
		text = fmt.Sprintf("*%s* asks: %s (call `%s`)", req.Agent, req.Question.Text, req.CallID)
	}
	ctx := fmt.Sprintf("rule %s · %s · expires %s", orDash(req.Rule), orDash(req.Reason), req.ExpiresAt.Format(time.RFC3339))
	blocks := []any{
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}},
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "```" + strings.ReplaceAll(args, "```", "`\u200b``") + "```"}},
		map[string]any{"type": "context", "elements": []any{map[string]any{"type": "mrkdwn", "text": ctx}}},
	}
	if req.Question == nil {
		edit := slackArgsBlocks(req) // approve with changes (edit.go)
		blocks = append(blocks, edit...)
		buttons := []any{
			map[string]any{"type": "button", "action_id": SlackApprove, "style": "primary", "value": req.CallID,
				"text": map[string]any{"type": "plain_text", "text": "Approve"}},
			map[string]any{"type": "button", "action_id": SlackReject, "style": "danger", "value": req.CallID,
				"text": map[string]any{"type": "plain_text", "text": "Reject"}},
		}
		if len(edit) > 0 {
			buttons = append(buttons, map[string]any{"type": "button", "action_id": SlackApproveEdit, "value": req.CallID,
				"text": map[string]any{"type": "plain_text", "text": "Approve with changes"}})
		}
		blocks = append(blocks, map[string]any{"type": "actions", "block_id": "toolgate_" + req.CallID, "elements": buttons})
	} else if page != "" {
		blocks = append(blocks, map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "<" + page + "/|Answer on the approvals page>"}})
	}
	return map[string]any{"text": fmt.Sprintf("toolgate %s needed: %s %s (%s)", what, req.Agent, req.Tool, req.CallID), "blocks": blocks}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Errors of Slack request verification, for errors.Is.
var (
	// ErrSlackSignature: the v0 signature is missing or does not match.
	ErrSlackSignature = errors.New("bad slack signature")
	// ErrSlackStale: the timestamp is missing or outside the replay window.
	ErrSlackStale = errors.New("stale slack request")
)

// SlackReplayWindow is how far a Slack request's timestamp may be from now.
const SlackReplayWindow = 5 * time.Minute

// VerifySlack checks a Slack request the way Slack documents it: the
// X-Slack-Request-Timestamp within SlackReplayWindow of now, and
// X-Slack-Signature equal to "v0=" + hex(HMAC-SHA256(signingSecret,
// "v0:" + timestamp + ":" + body)), compared in constant time.
func VerifySlack(signingSecret string, h http.Header, body []byte, now time.Time) error {
	if signingSecret == "" {
		return fmt.Errorf("%w: no signing secret configured", ErrSlackSignature)
	}
	ts := h.Get("X-Slack-Request-Timestamp")
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: X-Slack-Request-Timestamp %q is not a unix time", ErrSlackStale, ts)
	}
	if d := now.Sub(time.Unix(secs, 0)); d > SlackReplayWindow || d < -SlackReplayWindow {
		return fmt.Errorf("%w: timestamp is %s from now", ErrSlackStale, d.Round(time.Second))
	}
	got := h.Get("X-Slack-Signature")
	if !hmac.Equal([]byte(got), []byte(SlackSignature(signingSecret, ts, body))) {
		return fmt.Errorf("%w: X-Slack-Signature does not match the body", ErrSlackSignature)
	}
	return nil
}

// SlackSignature computes Slack's v0 request signature.
func SlackSignature(signingSecret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(signingSecret))
	m.Write([]byte("v0:" + timestamp + ":"))
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}
