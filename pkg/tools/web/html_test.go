package web

import (
	"flag"
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
