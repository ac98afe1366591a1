package events

import (
	"strings"
	"testing"
)

// FuzzParseCallSubject: ParseCallSubject takes exactly the subjects of
// four tokens toolgate.call.<agent>.<tool>, as splitting on dots does.
func FuzzParseCallSubject(f *testing.F) {
	for _, s := range []string{"toolgate.call.alice.read", "toolgate.call..read", "toolgate.call.alice.", "toolgate.call.alice",
		"toolgate.call.alice.read.more", "toolgate.result.alice.read", "toolgatex.call.a.b", "", "toolgate.call.a.b.", ".toolgate.call.a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		agent, tool, err := ParseCallSubject(s)
		p := strings.Split(s, ".")
		want := len(p) == 4 && p[0] == Prefix && p[1] == "call"
		if want != (err == nil) || want && (agent != p[2] || tool != p[3]) {
			t.Fatalf("ParseCallSubject(%q) = %q, %q, %v", s, agent, tool, err)
		}
	})
}
