package test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/mcpserver"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestMCPHTTPParkedCallAnswersPending: over the worker's HTTP face, a
// client that sends no progress token (it cannot be kept waiting by
// notifications) and times its requests out after 60 s, as the
// TypeScript SDK does, gets an answer to a call that parks within that
// timeout: not an error, status pending in _meta, the call id, and how to
// collect it. The call stays parked; once a person approves it,
// toolgate_call_status collects the result.
func TestMCPHTTPParkedCallAnswersPending(t *testing.T) {
	s := startMCPStack(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "no-progress", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.mcpURL,
		HTTPClient: &http.Client{Transport: bearerTransport{s.token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second) // the client's request timeout
	defer rcancel()
	r, err := cs.CallTool(rctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "pending.txt", "content": "approved\n"}})
	if err != nil {
		t.Fatalf("the parked call's request got no answer within the client's timeout: %v", err)
	}
	id, _ := r.Meta["toolgate/call_id"].(string)
	if r.IsError || r.Meta["toolgate/status"] != string(events.StatusPending) || id == "" ||
		!strings.Contains(text(r), mcpserver.StatusTool) || !strings.Contains(text(r), id) {
		t.Fatalf("answer to a parked call: error %v, meta %v, %q", r.IsError, r.Meta, text(r))
	}
	if _, err := os.Stat(filepath.Join(s.worker.ws, "pending.txt")); err == nil {
		t.Fatal("the write ran before anyone approved")
	}
	s.approve(t, id)
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.StatusTool, Arguments: map[string]any{"call_id": id, "wait_seconds": 50}})
	if err != nil {
		t.Fatalf("%s: %v", mcpserver.StatusTool, err)
	}
	if r.IsError || r.Meta["toolgate/status"] != string(events.StatusOK) {
		t.Fatalf("collected result: error %v, meta %v, %q", r.IsError, r.Meta, text(r))
	}
	if b, err := os.ReadFile(filepath.Join(s.worker.ws, "pending.txt")); err != nil || string(b) != "approved\n" {
		t.Fatalf("the approved write: %q %v", b, err)
	}
}
