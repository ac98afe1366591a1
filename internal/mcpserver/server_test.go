package mcpserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/pkg/events"
)

func TestResultMapping(t *testing.T) {
	tests := []struct {
		name    string
		r       events.ResultData
		text    string
		isError bool
	}{
		{"ok", events.ResultData{CallID: "c", Status: events.StatusOK, Output: "done"}, "done", false},
		{"tool failed", events.ResultData{CallID: "c", Status: events.StatusOK, Output: "exit 1", IsError: true}, "exit 1", true},
		{"denied", events.ResultData{CallID: "c", Status: events.StatusDenied, IsError: true, Output: "x",
			Decision: &events.Decision{Action: "deny", Reason: "sudo is forbidden", Rule: "builtin.forbidden"}},
			"denied by policy: sudo is forbidden (rule builtin.forbidden)", true},
		{"rejected", events.ResultData{CallID: "c", Status: events.StatusRejected, Output: "rejected by alice: no"}, "rejected: rejected by alice: no", true},
		{"expired", events.ResultData{CallID: "c", Status: events.StatusExpired, Output: "expired: no decision"}, "expired: expired: no decision", true},
		{"timeout", events.ResultData{CallID: "c", Status: events.StatusTimeout, Output: "partial"}, "timed out: the tool ran past its timeout and was stopped. partial", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := result(&tt.r)
			if txt := got.Content[0].(*mcp.TextContent).Text; txt != tt.text || got.IsError != tt.isError {
				t.Errorf("result = %q isError %v, want %q %v", txt, got.IsError, tt.text, tt.isError)
			}
			if got.Meta["toolgate/call_id"] != "c" || got.Meta["toolgate/status"] != string(tt.r.Status) {
				t.Errorf("meta = %v", got.Meta)
			}
		})
	}
}

func TestLocalOnly(t *testing.T) {
	h := localOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	tests := []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:8471", "", 200},
		{"localhost:8471", "http://localhost:8471", 200},
		{"[::1]:8471", "https://[::1]:8471", 200},
		{"LOCALHOST", "", 200},
		{"evil.example.com", "", 403},
		{"evil.example.com:8471", "http://localhost:8471", 403},
		{"localhost:8471", "http://evil.example.com", 403},
		{"localhost:8471", "null", 403},
		{"localhost:8471", "file://", 403},
		{"127.0.0.1.evil.example.com", "", 403},
		{"localhost.evil.example.com:80", "", 403},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "http://x/mcp", strings.NewReader("{}"))
		r.Host = tt.host
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Host %q Origin %q: %d, want %d", tt.host, tt.origin, w.Code, tt.want)
		}
	}
}

func TestAnnotationsFollowTheKind(t *testing.T) {
	if a := annotations("read"); !a.ReadOnlyHint || *a.DestructiveHint {
		t.Errorf("read: %+v", a)
	}
	for _, k := range []string{"write", "execute", "network", "other", ""} {
		if a := annotations(k); a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint {
			t.Errorf("%s: %+v, want destructive and not read-only", k, a)
		}
	}
}
