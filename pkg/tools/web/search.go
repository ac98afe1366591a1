package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
)

// DefaultSearchURL is Tavily's API; its search endpoint is POST /search.
const DefaultSearchURL = "https://api.tavily.com"

// Bounds of web_search.
const (
	DefaultSearchResults = 5
	MaxSearchResults     = 20
	DefaultSearchTimeout = 60 * time.Second
	maxSearchResponse    = 8 << 20
)

// SearchConfig configures web_search.
type SearchConfig struct {
	// APIKey is sent as "Authorization: Bearer KEY" (the worker reads it
	// from TAVILY_API_KEY). Required by NewSearch; without it Register
	// leaves web_search out.
	APIKey string `yaml:"-" json:"-"`
	// BaseURL is the API's base; the tool POSTs to BaseURL + "/search".
	// Empty means DefaultSearchURL. It is the operator's configuration,
	// not the agent's: the network allowlist does not apply to it.
	BaseURL string `yaml:"base_url,omitempty" json:"base_url,omitempty"`
	// Client sends the requests; nil means a client on a copy of
	// http.DefaultTransport (which honours the worker's HTTPS_PROXY).
	// Redirects are never followed.
	Client *http.Client `yaml:"-" json:"-"`
	// MaxOutput bounds the text returned, in characters. Zero means
	// tools.DefaultMaxOutput.
	MaxOutput int `yaml:"max_output,omitempty" json:"max_output,omitempty"`
}

// Validate names the field that is wrong.
func (c SearchConfig) Validate() error {
	if c.APIKey == "" {
		return errors.New("web_search config: api key: required (TAVILY_API_KEY)")
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("web_search config: base_url %q: want an http or https URL", c.BaseURL)
		}
	}
	if c.MaxOutput < 0 {
		return errors.New("web_search config: max_output: must not be negative")
	}
	return nil
}

// searchRequest is the body of Tavily's POST /search.
type searchRequest struct {
	Query          string   `json:"query"`
	SearchDepth    string   `json:"search_depth,omitempty"`
	Topic          string   `json:"topic,omitempty"`
	MaxResults     int      `json:"max_results"`
	IncludeAnswer  bool     `json:"include_answer"`
	TimeRange      string   `json:"time_range,omitempty"`
	IncludeDomains []string `json:"include_domains,omitempty"`
	ExcludeDomains []string `json:"exclude_domains,omitempty"`
	IncludeRaw     bool     `json:"include_raw_content"`
	IncludeImages  bool     `json:"include_images"`
}

// searchResult is one result of Tavily's response.
type searchResult struct {
	Title         string  `json:"title"`
	URL           string  `json:"url"`
	Content       string  `json:"content"`
	Score         float64 `json:"score"`
	PublishedDate string  `json:"published_date,omitempty"`
	RawContent    *string `json:"raw_content,omitempty"`
	Favicon       string  `json:"favicon,omitempty"`
}

// searchResponse is Tavily's response body. response_time is a number in
// the API's schema and a string in some of its examples: both are read.
type searchResponse struct {
	Query        string          `json:"query"`
	Answer       *string         `json:"answer"`
	Results      []searchResult  `json:"results"`
	ResponseTime json.RawMessage `json:"response_time"`
	RequestID    string          `json:"request_id"`
}

// apiError is Tavily's error body: {"detail": {"error": "..."}}.
type apiError struct {
	Detail json.RawMessage `json:"detail"`
}

func (e apiError) message() string {
	var d struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(e.Detail, &d) == nil && d.Error != "" {
		return d.Error
	}
	var s string
	if json.Unmarshal(e.Detail, &s) == nil {
		return s
	}
	return ""
}

type searcher struct {
	cfg      SearchConfig
	endpoint string
	client   *http.Client
}

// NewSearch returns the web_search tool, a client of Tavily's search API
// (or any service speaking it).
func NewSearch(cfg SearchConfig) (*tools.Tool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultSearchURL
	}
	s := &searcher{cfg: cfg, endpoint: strings.TrimRight(base, "/") + "/search", client: cfg.Client}
	if s.client == nil {
		s.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	c := *s.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	s.client = &c
	return &tools.Tool{
		Name: tooldef.WebSearch.Name,
		Description: "Search the web and return the most relevant results (title, URL, a content snippet, score), " +
			"and with include_answer a short answer written from them. search_depth advanced finds better snippets and is slower. " +
			"Use web_fetch to read a result in full.",
		Parameters: tooldef.WebSearch.MustSchema(map[string]map[string]any{
			"max_results": {"maximum": MaxSearchResults,
				"description": "How many results (default " + strconv.Itoa(DefaultSearchResults) + ")."},
		}),
		Kind:           policy.Kind(tooldef.WebSearch.Kind),
		Category:       "builtin",
		DefaultTimeout: DefaultSearchTimeout,
		MaxTimeout:     DefaultSearchTimeout,
		MaxOutput:      cfg.MaxOutput,
		Annotations:    tools.Annotations{ReadOnly: true, OpenWorld: true},
		Handler:        tools.HandlerFunc(s.search),
	}, nil
}

func (s *searcher) search(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	a, err := args(c)
	if err != nil {
		return nil, err
	}
	req := searchRequest{
		Query:          tools.ArgString(a, "query"),
		SearchDepth:    tools.ArgString(a, "search_depth"),
		Topic:          tools.ArgString(a, "topic"),
		TimeRange:      tools.ArgString(a, "time_range"),
		MaxResults:     DefaultSearchResults,
		IncludeDomains: tools.ArgStrings(a, "include_domains"),
		ExcludeDomains: tools.ArgStrings(a, "exclude_domains"),
	}
	if req.SearchDepth == "" {
		req.SearchDepth = "basic"
	}
	if n, ok := tools.ArgInt(a, "max_results"); ok && n > 0 {
		req.MaxResults = int(min(n, MaxSearchResults))
	}
	req.IncludeAnswer = tools.ArgBool(a, "include_answer")
	if strings.TrimSpace(req.Query) == "" {
		return fail("web_search: the query is empty"), nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
	hreq.Header.Set("User-Agent", "toolgate-web_search/1")
	resp, err := s.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fail("web_search: the search service cannot be reached: %v", err), nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxSearchResponse+1))
	if err != nil {
		return fail("web_search: reading the response: %v", err), nil
	}
	if len(data) > maxSearchResponse {
		return fail("web_search: the response is larger than %d bytes", maxSearchResponse), nil
	}
	if resp.StatusCode != http.StatusOK {
		var e apiError
		msg := ""
		if json.Unmarshal(data, &e) == nil {
			msg = e.message()
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return &tools.Output{Content: fmt.Sprintf("web_search: the search service answered %d: %s", resp.StatusCode, msg),
			IsError: true, Metadata: map[string]any{"status": resp.StatusCode}}, nil
	}
	var r searchResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return fail("web_search: the search service's response is not valid: %v", err), nil
	}
	return render(req.Query, &r), nil
}

// render writes the results for a model, and their fields as metadata.
func render(query string, r *searchResponse) *tools.Output {
	var b strings.Builder
	fmt.Fprintf(&b, "Search: %s\n", query)
	if r.Answer != nil && *r.Answer != "" {
		fmt.Fprintf(&b, "\nAnswer: %s\n", strings.TrimSpace(*r.Answer))
	}
	if len(r.Results) == 0 {
		b.WriteString("\nNo results.\n")
	}
	results := make([]map[string]any, 0, len(r.Results))
	for i, res := range r.Results {
		fmt.Fprintf(&b, "\n%d. %s\n   %s\n", i+1, collapse(res.Title), res.URL)
		if res.PublishedDate != "" {
			fmt.Fprintf(&b, "   published %s\n", res.PublishedDate)
		}
		if c := collapse(res.Content); c != "" {
			fmt.Fprintf(&b, "   %s\n", c)
		}
		m := map[string]any{"title": res.Title, "url": res.URL, "content": res.Content, "score": res.Score}
		if res.PublishedDate != "" {
			m["published_date"] = res.PublishedDate
		}
		results = append(results, m)
	}
	md := map[string]any{"results": results, "result_count": len(r.Results)}
	if r.Answer != nil {
		md["answer"] = *r.Answer
	}
	if rt := responseTime(r.ResponseTime); rt >= 0 {
		md["response_time"] = rt
	}
	if r.RequestID != "" {
		md["request_id"] = r.RequestID
	}
	return &tools.Output{Content: strings.TrimRight(b.String(), "\n"), Metadata: md}
}

// responseTime reads a number or a numeric string; -1 when neither.
func responseTime(raw json.RawMessage) float64 {
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return f
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			return v
		}
	}
	return -1
}
