package web

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestHTMLTextGolden(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "page.html"))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse("https://docs.python.org/3/tutorial/introduction.html")
	title, text := HTMLText(string(src), base)
	got := "Title: " + title + "\n\n" + text + "\n"
	golden := filepath.Join("testdata", "page.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("HTMLText output differs from %s (run with -update to accept):\n%s", golden, got)
	}
	for _, never := range []string{"never shown", "color: red", "hidden text", "also hidden", "enable javascript", "not text", "javascript:"} {
		if strings.Contains(got, never) {
			t.Errorf("the text holds %q", never)
		}
	}
}

// FuzzHTMLText: any input gives valid text without panicking, and the
// text never holds a script's content.
func FuzzHTMLText(f *testing.F) {
	for _, s := range []string{"<p>a<b>b</p>", "<pre>x\n y</pre>", "<a href=x>y</a>", "<table><td>1<td>2", "<title>t</title><script>s</script>", ""} {
		f.Add(s)
	}
	base, _ := url.Parse("https://example.org/a/b")
	f.Fuzz(func(t *testing.T, src string) {
		_, text := HTMLText("<script>SECRET-7</script>"+src, base)
		if strings.Contains(text, "SECRET-7") && !strings.Contains(src, "SECRET-7") {
			t.Fatalf("script content in the text: %q", text)
		}
		if utf8.ValidString(src) && !utf8.ValidString(text) {
			t.Fatalf("valid input, invalid text: %q", text)
		}
	})
}

// Hostile documents: nesting deeper than the parser takes (it then
// returns an error, not a tree) must still give text, never the raw
// markup with its scripts and hidden parts; rows of empty cells among
// whitespace give nothing but the text around them.
func TestHTMLTextHostile(t *testing.T) {
	deep := strings.Repeat("<div>", 600) + `<script>SECRET-7()</script><p hidden>hidden text</p><style>.x{}</style>visible <b>words</b>` + strings.Repeat("</div>", 600)
	cells := "<table><tr>" + strings.Repeat(" <td></td>\n", 5000) + "<td>last</td></tr></table><p>after</p>"
	for _, tc := range []struct {
		name, src string
		want      []string
		never     []string
	}{
		{"nesting beyond the parser's limit", deep, []string{"visible words"}, []string{"SECRET-7", "<div", "<script", ".x{}"}},
		{"many empty cells", cells, []string{"last", "after"}, []string{"|  |"}},
	} {
		_, text := HTMLText(tc.src, nil)
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: text lacks %q: %.300q", tc.name, w, text)
			}
		}
		for _, n := range tc.never {
			if strings.Contains(text, n) {
				t.Errorf("%s: text holds %q: %.300q", tc.name, n, text)
			}
		}
	}
}

// BenchmarkHTMLTextHostile converts documents built to make a converter
// slow: the work must grow with the input's size, not its square.
func BenchmarkHTMLTextHostile(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for name, src := range map[string]string{
			"empty-cells":       "<table><tr>" + strings.Repeat(" <td></td>", n),
			"spaces-then-cells": "<table><tr><td>" + strings.Repeat(" ", 10*n) + "x" + strings.Repeat("<td>", n),
			"nested-links":      strings.Repeat("<a href=x><div>", n/20),
			"deep":              strings.Repeat("<div>", n),
		} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				for b.Loop() {
					HTMLText(src, nil)
				}
			})
		}
	}
}
