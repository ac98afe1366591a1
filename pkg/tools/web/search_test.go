package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/web"
)

// tavily is a stand-in for api.tavily.com speaking its wire format: POST
// /search with a bearer key and a JSON body, answered with the body its
// API reference documents. It keeps what it received.
type tavily struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
}

type received struct {
	method, path, auth, contentType string
	body                            map[string]any
}

const tavilyAnswer = `{
  "query": "Who is Leo Messi?",
  "answer": "Lionel Messi, born in 1987, is an Argentine footballer.",
  "images": [],
  "results": [
    {
      "title": "Lionel Messi Facts | Britannica",
      "url": "https://www.britannica.com/facts/Lionel-Messi",
      "content": "Lionel Messi, an Argentine footballer, is widely regarded as one of the greatest football players of his generation.",
      "score": 0.81025416,
      "raw_content": null,
      "favicon": "https://britannica.com/favicon.png"
    },
    {
      "title": "Lionel Messi - Wikipedia",
      "url": "https://en.wikipedia.org/wiki/Lionel_Messi",
      "content": "Lionel Andrés Messi is an Argentine professional footballer.",
      "score": 0.7,
      "published_date": "2025-06-01"
    }
  ],
  "response_time": "1.67",
  "request_id": "123e4567-e89b-12d3-a456-426614174111"
}`

func newTavily(t *testing.T) *tavily {
	tv := &tavily{}
	tv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rec := received{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"), contentType: r.Header.Get("Content-Type")}
		json.Unmarshal(raw, &rec.body)
		tv.mu.Lock()
		tv.requests = append(tv.requests, rec)
		tv.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodPost || r.URL.Path != "/search" {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"detail": "Not Found"}`)
			return
		}
		if r.Header.Get("Authorization") != "Bearer tvly-test-key" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"detail": {"error": "Unauthorized: missing or invalid API key."}}`)
			return
		}
		if q, _ := rec.body["query"].(string); q == "nothing" {
			io.WriteString(w, `{"query": "nothing", "answer": null, "images": [], "results": [], "response_time": 0.42}`)
			return
		}
		io.WriteString(w, tavilyAnswer)
	}))
	t.Cleanup(tv.Close)
	return tv
}

func searchTool(t *testing.T, base, key string) *tools.Pipeline {
	t.Helper()
	reg := tools.NewRegistry()
	if err := web.Register(reg, web.Config{Search: web.SearchConfig{APIKey: key, BaseURL: base}}); err != nil {
		t.Fatal(err)
	}
	return tools.NewPipeline(reg)
}

func search(t *testing.T, p *tools.Pipeline, args map[string]any) *tools.Output {
	t.Helper()
	raw, _ := json.Marshal(args)
	out, err := p.Handle(context.Background(), &tools.Call{ID: "s1", Agent: "a", Name: "web_search", Arguments: raw})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSearchTavilyWireFormat(t *testing.T) {
	tv := newTavily(t)
	p := searchTool(t, tv.URL, "tvly-test-key")
	out := search(t, p, map[string]any{"query": "Who is Leo Messi?", "max_results": 2, "search_depth": "advanced",
		"include_answer": true, "include_domains": []string{"britannica.com", "wikipedia.org"}, "topic": "general"})
	if out.IsError {
		t.Fatalf("error: %s", out.Content)
	}
	tv.mu.Lock()
	req := tv.requests[0]
	tv.mu.Unlock()
	if req.method != "POST" || req.path != "/search" || req.auth != "Bearer tvly-test-key" || req.contentType != "application/json" {
		t.Errorf("request %s %s, Authorization %q, Content-Type %q", req.method, req.path, req.auth, req.contentType)
	}
	want := map[string]any{"query": "Who is Leo Messi?", "max_results": 2.0, "search_depth": "advanced", "include_answer": true,
		"topic": "general", "include_domains": []any{"britannica.com", "wikipedia.org"}, "include_raw_content": false, "include_images": false}
	for k, v := range want {
		if got, _ := json.Marshal(req.body[k]); string(got) != mustJSON(v) {
			t.Errorf("body %s = %s, want %s", k, got, mustJSON(v))
		}
	}
	if _, ok := req.body["api_key"]; ok {
		t.Error("the key travelled in the body as well as the header")
	}
	for _, w := range []string{"Answer: Lionel Messi, born in 1987", "1. Lionel Messi Facts | Britannica\n   https://www.britannica.com/facts/Lionel-Messi",
		"2. Lionel Messi - Wikipedia", "published 2025-06-01"} {
		if !strings.Contains(out.Content, w) {
			t.Errorf("content lacks %q:\n%s", w, out.Content)
		}
	}
	if out.Metadata["result_count"] != 2 || out.Metadata["response_time"] != 1.67 || out.Metadata["request_id"] != "123e4567-e89b-12d3-a456-426614174111" {
		t.Errorf("metadata %v", out.Metadata)
	}

	out = search(t, p, map[string]any{"query": "nothing"})
	if out.IsError || !strings.Contains(out.Content, "No results.") || out.Metadata["response_time"] != 0.42 {
		t.Errorf("no results: %s %v", out.Content, out.Metadata)
	}
	tv.mu.Lock()
	defaults := tv.requests[1].body
	tv.mu.Unlock()
	if defaults["max_results"] != 5.0 || defaults["search_depth"] != "basic" || defaults["include_answer"] != false {
		t.Errorf("defaults sent: %v", defaults)
	}
}

func TestSearchErrors(t *testing.T) {
	tv := newTavily(t)
	out := search(t, searchTool(t, tv.URL, "tvly-wrong-key"), map[string]any{"query": "x"})
	if !out.IsError || !strings.Contains(out.Content, "answered 401: Unauthorized: missing or invalid API key.") {
		t.Errorf("bad key: %s", out.Content)
	}
	if strings.Contains(out.Content, "tvly-wrong-key") {
		t.Error("the key is in the output")
	}
	out = search(t, searchTool(t, tv.URL+"/v2", "tvly-test-key"), map[string]any{"query": "x"})
	if !out.IsError || !strings.Contains(out.Content, "answered 404: Not Found") {
		t.Errorf("wrong base: %s", out.Content)
	}
	tv.Close()
	out = search(t, searchTool(t, tv.URL, "tvly-test-key"), map[string]any{"query": "x"})
	if !out.IsError || !strings.Contains(out.Content, "cannot be reached") {
		t.Errorf("service down: %s", out.Content)
	}
	// Without a key there is no web_search.
	reg := tools.NewRegistry()
	if err := web.Register(reg, web.Config{}); err != nil {
		t.Fatal(err)
	}
	if names := reg.Names(); len(names) != 1 || names[0] != "web_fetch" {
		t.Errorf("tools without a key: %v", names)
	}
	if _, err := web.NewSearch(web.SearchConfig{APIKey: "k", BaseURL: "ftp://x"}); err == nil || !strings.Contains(err.Error(), "base_url") {
		t.Errorf("bad base URL: %v", err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
