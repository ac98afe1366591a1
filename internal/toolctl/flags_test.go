package toolctl

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func callFlags() (*flag.FlagSet, *string, *bool) {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	j := fs.String("json", "", "")
	fs.Duration("wait", 0, "")
	r := fs.Bool("result", false, "")
	return fs, j, r
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args   []string
		words  []string
		json   string
		result bool
	}{
		{[]string{"--json", `{"a":1}`, "read"}, []string{"read"}, `{"a":1}`, false},
		{[]string{"read", "--json", `{"a":1}`}, []string{"read"}, `{"a":1}`, false},
		{[]string{"read", "-json={}", "k=v", "--result"}, []string{"read", "k=v"}, `{}`, true},
		{[]string{"--result", "read", "k=v"}, []string{"read", "k=v"}, "", true},
		{[]string{"read", "--", "--json", "x"}, []string{"read", "--json", "x"}, "", false},
		{[]string{"-", "read"}, []string{"-", "read"}, "", false},
	}
	for _, tt := range tests {
		fs, j, r := callFlags()
		words, err := parseFlags(fs, tt.args)
		if err != nil || !slices.Equal(words, tt.words) || *j != tt.json || *r != tt.result {
			t.Errorf("parseFlags(%q) = %q %v, json %q result %v", tt.args, words, err, *j, *r)
		}
	}
}

func TestTakeGlobals(t *testing.T) {
	g := flag.NewFlagSet("toolctl", flag.ContinueOnError)
	g.SetOutput(io.Discard)
	nats := g.String("nats", "default", "")
	agent := g.String("agent", "toolctl", "")
	rest, err := takeGlobals(g, []string{"read", "--nats", "u", "k=v", "--agent=a", "--wait", "1s", "--", "--nats", "x"})
	if err != nil || *nats != "u" || *agent != "a" || !slices.Equal(rest, []string{"read", "k=v", "--wait", "1s", "--", "--nats", "x"}) {
		t.Fatalf("rest %q err %v nats %q agent %q", rest, err, *nats, *agent)
	}
	*agent = "toolctl"
	rest, _ = takeGlobals(g, []string{"check", "--agent", "ci-7"}, "agent")
	if *agent != "toolctl" || !slices.Equal(rest, []string{"check", "--agent", "ci-7"}) {
		t.Fatalf("an own flag was taken: %q agent %q", rest, *agent)
	}
	if _, err := takeGlobals(g, []string{"read", "--nats"}); err == nil {
		t.Fatal("--nats without a value accepted")
	}
}

// FuzzParseFlags: any command line parses without a panic, and the words
// it returns are the words of the line, in order.
func FuzzParseFlags(f *testing.F) {
	for _, s := range []string{"--json\x00{}\x00read", "read\x00--\x00-x", "-\x00--result=true\x00k=v", "--wait\x00", "---json\x00x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		fs, _, _ := callFlags()
		words, err := parseFlags(fs, args)
		if err != nil {
			return
		}
		i := 0
		for _, w := range words {
			for i < len(args) && args[i] != w {
				i++
			}
			if i == len(args) {
				t.Fatalf("word %q is not in %q in order", w, args)
			}
			i++
		}
	})
}
