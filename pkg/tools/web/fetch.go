package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Bounds of web_fetch.
const (
	DefaultMaxBytes     = 1 << 20  // body bytes read when the call sets none
	MaxMaxBytes         = 10 << 20 // the most a call may ask for
	DefaultFetchTimeout = 30 * time.Second
	MaxFetchTimeout     = 120 * time.Second
	MaxRedirects        = 10
	// progressEvery is how many body bytes pass between progress lines.
	progressEvery = 256 << 10
)

// FetchConfig configures web_fetch.
type FetchConfig struct {
	// Egress returns the connections of one call (the agent's allowlist
	// and the address checks). Nil refuses every connection.
	Egress func(c *tools.Call) Egress `yaml:"-" json:"-"`
	// UserAgent is sent with every request; empty means "toolgate-web_fetch/1".
	UserAgent string `yaml:"user_agent,omitempty" json:"user_agent,omitempty"`
	// MaxOutput bounds the text returned, in characters. Zero means
	// tools.DefaultMaxOutput.
	MaxOutput int `yaml:"max_output,omitempty" json:"max_output,omitempty"`
}

type fetcher struct{ cfg FetchConfig }

// NewFetch returns the web_fetch tool.
func NewFetch(cfg FetchConfig) (*tools.Tool, error) {
	if cfg.MaxOutput < 0 {
		return nil, errors.New("web_fetch config: max_output: must not be negative")
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "toolgate-web_fetch/1"
	}
	f := &fetcher{cfg: cfg}
	return &tools.Tool{
		Name: tooldef.WebFetch.Name,
		Description: "Fetch a URL with GET and return its content as text. HTML pages are turned into readable text " +
			"(headings, paragraphs, lists, links as [text](url)); other text (plain, JSON, XML, CSV, ...) is returned as is; " +
			"binary content (images, PDFs, archives) is refused. Redirects are followed (at most " + strconv.Itoa(MaxRedirects) + "). " +
			"Only hosts the policy's network allowlist names can be reached, never private or loopback addresses. " +
			"At most max_bytes of the body are read (default " + strconv.Itoa(DefaultMaxBytes) + ").",
		Parameters: tooldef.WebFetch.MustSchema(map[string]map[string]any{
			"max_bytes": {"maximum": MaxMaxBytes,
				"description": "Most bytes of the body to read (default " + strconv.Itoa(DefaultMaxBytes) + "); the rest is cut."},
			"timeout": {"maximum": MaxFetchTimeout.Milliseconds(),
				"description": "Timeout of the whole fetch in milliseconds (default " + strconv.FormatInt(DefaultFetchTimeout.Milliseconds(), 10) + ")."},
		}),
		Kind:            policy.Kind(tooldef.WebFetch.Kind),
		Category:        "builtin",
		DefaultTimeout:  DefaultFetchTimeout,
		MaxTimeout:      MaxFetchTimeout,
		TimeoutArgument: "timeout",
		MaxOutput:       cfg.MaxOutput,
		Annotations:     tools.Annotations{ReadOnly: true, OpenWorld: true},
		Handler:         tools.HandlerFunc(f.fetch),
	}, nil
}

// fetchResult is what one fetch gathered.
type fetchResult struct {
	final       *url.URL
	status      int
	contentType string
	body        []byte
	truncated   bool
	redirects   []string
}

func (f *fetcher) fetch(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	a, err := args(c)
	if err != nil {
		return nil, err
	}
	raw := tools.ArgString(a, "url")
	maxBytes := int64(DefaultMaxBytes)
	if n, ok := tools.ArgInt(a, "max_bytes"); ok && n > 0 {
		maxBytes = min(n, MaxMaxBytes)
	}
	timeout := DefaultFetchTimeout
	if ms, ok := tools.ArgInt(a, "timeout"); ok && ms > 0 {
		timeout = min(time.Duration(ms)*time.Millisecond, MaxFetchTimeout)
	}
	if _, _, err := policy.URLHostPort(raw); err != nil {
		return fail("web_fetch %s: %v", raw, err), nil
	}
	if f.cfg.Egress == nil {
		return nil, errNoEgress
	}
	eg := f.cfg.Egress(c)
	if eg == nil {
		return nil, errNoEgress
	}
	progress := func(format string, args ...any) {
		if c.Progress != nil {
			c.Progress(tools.StreamStatus, fmt.Sprintf(format, args...)+"\n")
		}
	}
	cause := fmt.Errorf("%w: web_fetch ran past its timeout of %s", tools.ErrTimeout, timeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, cause)
	defer cancel()
	res, err := f.get(ctx, eg, raw, maxBytes, progress)
	if err != nil {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), tools.ErrTimeout) {
			return nil, context.Cause(ctx)
		}
		return fail("web_fetch %s: %v", raw, err), nil
	}
	return f.output(raw, res), nil
}

// get follows the URL through its redirects, each judged before it is
// followed (the dialer judges it again at connection time), and reads at
// most maxBytes of the final body.
func (f *fetcher) get(ctx context.Context, eg Egress, raw string, maxBytes int64, progress func(string, ...any)) (*fetchResult, error) {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            eg.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    15 * time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		DisableCompression:     false,
	}
	defer tr.CloseIdleConnections()
	res := &fetchResult{}
	client := &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > MaxRedirects {
			return fmt.Errorf("more than %d redirects", MaxRedirects)
		}
		host, port, err := policy.URLHostPort(req.URL.String())
		if err != nil {
			return fmt.Errorf("redirect to %s refused: %w", req.URL.Redacted(), err)
		}
		if err := eg.Check(host, port); err != nil {
			return fmt.Errorf("redirect to %s refused: %w", req.URL.Redacted(), err)
		}
		res.redirects = append(res.redirects, req.URL.String())
		progress("redirected to %s", req.URL.Redacted())
		return nil
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5")
	progress("GET %s", req.URL.Redacted())
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is already named
		}
		return nil, err
	}
	defer resp.Body.Close()
	res.final, res.status, res.contentType = resp.Request.URL, resp.StatusCode, resp.Header.Get("Content-Type")
	progress("%s %s, %s", resp.Status, orNone(res.contentType), sizeText(resp.ContentLength))

	// Enough to tell text from binary before reading the rest.
	head := make([]byte, min(512, maxBytes+1))
	n, err := io.ReadFull(resp.Body, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read body: %w", err)
	}
	head = head[:n]
	if isBinary(res.contentType, head) {
		res.body = head
		return res, errBinary{contentType: binaryType(res.contentType, head), length: resp.ContentLength}
	}
	var buf bytes.Buffer
	buf.Write(head)
	next := int64(progressEvery)
	chunk := make([]byte, 32<<10)
	for int64(buf.Len()) <= maxBytes {
		n, err := resp.Body.Read(chunk)
		buf.Write(chunk[:n])
		if int64(buf.Len()) >= next {
			progress("read %d bytes", buf.Len())
			next += progressEvery
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read body: %w", err)
		}
	}
	body := buf.Bytes()
	if int64(len(body)) > maxBytes {
		body, res.truncated = body[:maxBytes], true
	}
	res.body = body
	return res, nil
}

// errBinary refuses a binary body.
type errBinary struct {
	contentType string
	length      int64
}

func (e errBinary) Error() string {
	return fmt.Sprintf("binary content (%s, %s) is not returned: web_fetch returns text and HTML only", e.contentType, sizeText(e.length))
}

func orNone(s string) string {
	if s == "" {
		return "no content type"
	}
	return s
}

func sizeText(n int64) string {
	if n < 0 {
		return "length unknown"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// textTypes are media types outside text/* whose bodies are text.
var textTypes = map[string]bool{
	"application/json": true, "application/xml": true, "application/javascript": true, "application/ecmascript": true,
	"application/x-javascript": true, "application/yaml": true, "application/x-yaml": true, "application/toml": true,
	"application/x-sh": true, "application/sql": true, "application/graphql": true, "application/x-ndjson": true,
	"application/xhtml+xml": true, "application/rss+xml": true, "application/atom+xml": true, "image/svg+xml": true,
	"application/x-www-form-urlencoded": true, "application/csv": true, "application/ld+json": true,
}

// isBinary decides from the declared type, and from the first bytes when
// the type says nothing useful.
func isBinary(contentType string, head []byte) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case strings.HasPrefix(mt, "text/"), textTypes[mt], strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return bytes.IndexByte(head, 0) >= 0 && !utf16BOM(head)
	case mt == "" || mt == "application/octet-stream" || mt == "binary/octet-stream":
		sniffed, _, _ := mime.ParseMediaType(http.DetectContentType(head))
		if strings.HasPrefix(sniffed, "text/") {
			return false
		}
		return bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(trimPartialRune(head))
	}
	return true
}

func utf16BOM(b []byte) bool {
	return bytes.HasPrefix(b, []byte{0xFF, 0xFE}) || bytes.HasPrefix(b, []byte{0xFE, 0xFF})
}

// trimPartialRune drops a rune cut at the end of a prefix.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

func binaryType(contentType string, head []byte) string {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt != "" && mt != "application/octet-stream" {
		return mt
	}
	return strings.SplitN(http.DetectContentType(head), ";", 2)[0]
}

// output renders a fetched page for the model.
func (f *fetcher) output(raw string, res *fetchResult) *tools.Output {
	mt, _, _ := mime.ParseMediaType(res.contentType)
	text := decode(res.body, res.contentType, res.truncated)
	isHTML := mt == "text/html" || mt == "application/xhtml+xml" ||
		(mt == "" && strings.HasPrefix(http.DetectContentType(res.body), "text/html"))
	title := ""
	if isHTML {
		title, text = HTMLText(text, res.final)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\n", res.final.Redacted())
	if title != "" {
		fmt.Fprintf(&b, "Title: %s\n", title)
	}
	fmt.Fprintf(&b, "Status: %d\n", res.status)
	if res.truncated {
		fmt.Fprintf(&b, "Note: the body was cut after %d bytes (max_bytes)\n", len(res.body))
	}
	b.WriteString("\n")
	b.WriteString(text)
	md := map[string]any{
		"url":          res.final.String(),
		"status":       res.status,
		"content_type": res.contentType,
		"bytes":        len(res.body),
		"truncated":    res.truncated,
	}
	if title != "" {
		md["title"] = title
	}
	if len(res.redirects) > 0 {
		md["redirects"] = res.redirects
	}
	return &tools.Output{Content: b.String(), IsError: res.status >= 400, Metadata: md}
}

// decode turns the body into UTF-8 by its declared (or sniffed) charset;
// a body cut at max_bytes may end in part of a character, which is
// dropped.
func decode(body []byte, contentType string, truncated bool) string {
	_, params, _ := mime.ParseMediaType(contentType)
	cs := strings.ToLower(params["charset"])
	if cs == "" || cs == "utf-8" || cs == "utf8" || cs == "us-ascii" {
		t := body
		if truncated {
			t = trimPartialRune(body)
		}
		if utf8.Valid(t) && !utf16BOM(body) {
			return string(t)
		}
	}
	r, err := charset.NewReader(bytes.NewReader(body), contentType)
	if err != nil {
		return strings.ToValidUTF8(string(body), "\uFFFD")
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return strings.ToValidUTF8(string(body), "\uFFFD")
	}
	return strings.ToValidUTF8(string(out), "\uFFFD")
}
