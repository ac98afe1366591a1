package web

import (
	"net/url"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// HTMLText turns an HTML document into readable text for a model: the
// title, then headings as "#" lines, paragraphs and blocks separated by
// blank lines, list items as "- ", table cells separated by " | ",
// preformatted text kept as it is, links as [text](absolute url) and
// images as [image: alt]. Scripts, styles, forms' hidden parts and the
// like are dropped. base resolves relative links; nil keeps them.
func HTMLText(src string, base *url.URL) (title, text string) {
	w := &textWriter{base: base}
	doc, err := html.Parse(strings.NewReader(src))
	if err != nil {
		// The parser refuses nesting deeper than it takes (an error, no
		// tree): the text is read token by token instead, never the
		// markup as it is.
		return strings.TrimSpace(collapse(tokenTitle(src))), tokenText(src)
	}
	w.walk(doc)
	return strings.TrimSpace(collapse(w.title.String())), w.finish()
}

// skipped are elements whose content is not text for a reader.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true, atom.Svg: true,
	atom.Math: true, atom.Iframe: true, atom.Object: true, atom.Embed: true, atom.Canvas: true,
	atom.Head: true, atom.Select: true, atom.Button: true, atom.Input: true, atom.Textarea: true,
}

// blocks are elements that start and end on lines of their own.
var blocks = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Main: true, atom.Header: true,
	atom.Footer: true, atom.Nav: true, atom.Aside: true, atom.Blockquote: true, atom.Ul: true, atom.Ol: true,
	atom.Dl: true, atom.Dt: true, atom.Dd: true, atom.Table: true, atom.Tr: true, atom.Figure: true,
	atom.Figcaption: true, atom.Form: true, atom.Fieldset: true, atom.Address: true, atom.Details: true,
	atom.Summary: true, atom.Body: true, atom.Html: true, atom.Hr: true,
}

var headings = map[atom.Atom]int{atom.H1: 1, atom.H2: 2, atom.H3: 3, atom.H4: 4, atom.H5: 5, atom.H6: 6}

type textWriter struct {
	base *url.URL
	out  strings.Builder
	line strings.Builder // the current line, whitespace collapsed when flushed
	// lineText: the current line holds more than whitespace (known as it
	// is written: looking at the line again each time would make a row
	// of many cells quadratic).
	lineText bool
	title    strings.Builder
	pre      int // depth inside <pre>
	// blank: a blank line is owed before the next text.
	blank bool
	// started: some text has been written.
	started bool
}

func (w *textWriter) walk(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
		return
	case html.ElementNode:
	case html.DocumentNode:
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			w.walk(c)
		}
		return
	default:
		return
	}
	if n.DataAtom == atom.Title || n.DataAtom == atom.Head {
		w.findTitle(n)
		return
	}
	if skipped[n.DataAtom] || hidden(n) {
		return
	}
	switch {
	case headings[n.DataAtom] > 0:
		w.paragraph()
		w.write(strings.Repeat("#", headings[n.DataAtom]) + " ")
		w.children(n)
		w.paragraph()
		return
	case n.DataAtom == atom.Br:
		w.newline()
		return
	case n.DataAtom == atom.Li:
		w.newline()
		w.write("- ")
		w.children(n)
		w.newline()
		return
	case n.DataAtom == atom.Td || n.DataAtom == atom.Th:
		if w.lineText {
			w.write(" | ")
		}
		w.children(n)
		return
	case n.DataAtom == atom.Pre:
		w.paragraph()
		w.pre++
		w.children(n)
		w.pre--
		w.paragraph()
		return
	case n.DataAtom == atom.Img:
		if alt := strings.TrimSpace(attr(n, "alt")); alt != "" {
			w.write("[image: " + collapse(alt) + "]")
		}
		return
	case n.DataAtom == atom.A:
		href := w.resolve(attr(n, "href"))
		if href == "" {
			w.children(n)
			return
		}
		var inner textWriter
		inner.base = w.base
		inner.children(n)
		label := collapse(inner.finish())
		switch {
		case label == "":
		case label == href:
			w.write(href)
		default:
			w.write("[" + label + "](" + href + ")")
		}
		return
	case blocks[n.DataAtom]:
		if n.DataAtom == atom.Tr || n.DataAtom == atom.Dt || n.DataAtom == atom.Dd {
			w.newline()
		} else {
			w.paragraph()
		}
		w.children(n)
		if n.DataAtom == atom.Tr || n.DataAtom == atom.Dt || n.DataAtom == atom.Dd {
			w.newline()
		} else {
			w.paragraph()
		}
		return
	}
	w.children(n)
}

// findTitle keeps the text of the first <title> under n.
func (w *textWriter) findTitle(n *html.Node) {
	if n.Type == html.ElementNode && n.DataAtom == atom.Title {
		if w.title.Len() == 0 {
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.TextNode {
					w.title.WriteString(c.Data)
				}
			}
		}
		return
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.findTitle(c)
	}
}

func (w *textWriter) children(n *html.Node) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c)
	}
}

// write adds s to the current line.
func (w *textWriter) write(s string) {
	if !w.lineText && strings.TrimSpace(s) != "" {
		w.lineText = true
	}
	w.line.WriteString(s)
}

// resetLine empties the current line.
func (w *textWriter) resetLine() {
	w.line.Reset()
	w.lineText = false
}

func (w *textWriter) text(s string) {
	if w.pre > 0 {
		// Preformatted text goes out line by line as it is.
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			if i > 0 {
				w.flushRaw()
			}
			w.write(l)
		}
		return
	}
	w.write(s)
}

// flushRaw ends a preformatted line without collapsing it.
func (w *textWriter) flushRaw() {
	w.emit(strings.TrimRight(w.line.String(), " \t\r"), true)
	w.resetLine()
}

// newline ends the current line.
func (w *textWriter) newline() {
	if w.pre > 0 {
		w.flushRaw()
		return
	}
	l := collapse(w.line.String())
	w.resetLine()
	if l == "" || l == "-" {
		return
	}
	w.emit(l, false)
}

func (w *textWriter) emit(l string, keepEmpty bool) {
	if l == "" && !keepEmpty {
		return
	}
	if w.started && w.blank {
		w.out.WriteString("\n")
	}
	w.blank = false
	w.out.WriteString(l)
	w.out.WriteString("\n")
	w.started = true
}

// paragraph ends the current line and owes a blank line before the next.
func (w *textWriter) paragraph() {
	w.newline()
	w.blank = true
}

func (w *textWriter) finish() string {
	w.newline()
	return strings.TrimRight(w.out.String(), "\n")
}

func (w *textWriter) resolve(href string) string {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") {
		return ""
	}
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	switch strings.ToLower(u.Scheme) {
	case "", "http", "https", "mailto":
	default:
		return "" // javascript:, data:, ...
	}
	if w.base != nil {
		u = w.base.ResolveReference(u)
	}
	return u.String()
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && strings.EqualFold(a.Key, key) {
			return a.Val
		}
	}
	return ""
}

// hidden reports elements a browser would not show.
func hidden(n *html.Node) bool {
	for _, a := range n.Attr {
		switch strings.ToLower(a.Key) {
		case "hidden":
			return true
		case "aria-hidden":
			if strings.EqualFold(a.Val, "true") {
				return true
			}
		case "style":
			s := strings.ToLower(strings.ReplaceAll(a.Val, " ", ""))
			if strings.Contains(s, "display:none") || strings.Contains(s, "visibility:hidden") {
				return true
			}
		}
	}
	return false
}

// collapse folds runs of whitespace into one space and trims the ends.
func collapse(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// tokenText is the text of a document the parser refused, read token by
// token: the text outside skipped and hidden elements, a line per block.
func tokenText(src string) string {
	z := html.NewTokenizer(strings.NewReader(src))
	var out, line strings.Builder
	flush := func() {
		if l := collapse(line.String()); l != "" {
			out.WriteString(l)
			out.WriteString("\n")
		}
		line.Reset()
	}
	// skip counts the open elements whose content is not shown.
	skip := 0
	var open []bool // per open element: does it skip?
	for {
		switch z.Next() {
		case html.ErrorToken:
			flush()
			return strings.TrimRight(out.String(), "\n")
		case html.TextToken:
			if skip == 0 {
				line.Write(z.Text())
			}
		case html.StartTagToken:
			t := z.Token()
			a := atom.Lookup([]byte(t.Data))
			if blocks[a] || headings[a] > 0 || a == atom.Li || a == atom.Br {
				flush()
			}
			if voidElement(a) {
				continue
			}
			s := skipped[a] || a == atom.Title || hidden(&html.Node{Attr: t.Attr})
			open = append(open, s)
			if s {
				skip++
			}
		case html.EndTagToken:
			t := z.Token()
			a := atom.Lookup([]byte(t.Data))
			if blocks[a] || headings[a] > 0 || a == atom.Li {
				flush()
			}
			if n := len(open); n > 0 {
				if open[n-1] {
					skip--
				}
				open = open[:n-1]
			}
		}
	}
}

// tokenTitle is the text of the first <title>, read token by token.
func tokenTitle(src string) string {
	z := html.NewTokenizer(strings.NewReader(src))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return ""
		case html.StartTagToken:
			if name, _ := z.TagName(); atom.Lookup(name) == atom.Title && z.Next() == html.TextToken {
				return string(z.Text())
			}
		}
	}
}

// voidElement reports elements that have no end tag.
func voidElement(a atom.Atom) bool {
	switch a {
	case atom.Area, atom.Base, atom.Br, atom.Col, atom.Embed, atom.Hr, atom.Img, atom.Input, atom.Link,
		atom.Meta, atom.Param, atom.Source, atom.Track, atom.Wbr:
		return true
	}
	return false
}
