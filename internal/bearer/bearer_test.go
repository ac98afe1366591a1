package bearer

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tokens")
	alice, err := Mint(dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := Mint(dir, "bob")
	if err != nil {
		t.Fatal(err)
	}
	old := alice
	if alice, err = Mint(dir, "alice"); err != nil { // replaces the first
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "alice.sha256")} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v %v, want no access for others", p, st.Mode(), err)
		}
	}
	forged := "tg1.bob." + alice[len("tg1.alice."):] // alice's secret under bob's name
	tests := []struct {
		name, token, agent string
		err                error
	}{
		{"alice", alice, "alice", nil},
		{"bob", bob, "bob", nil},
		{"replaced", old, "", ErrBadToken},
		{"empty", "", "", ErrNoToken},
		{"other agent's name", forged, "", ErrBadToken},
		{"unknown agent", "tg1.carol.AAAA", "", ErrBadToken},
		{"path in the name", "tg1.../alice.x", "", ErrBadToken},
		{"not ours", "ghp_abcdef", "", ErrBadToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Agent(dir, tt.token)
			if a != tt.agent || !errors.Is(err, tt.err) {
				t.Fatalf("Agent = %q, %v; want %q, %v", a, err, tt.agent, tt.err)
			}
		})
	}
	if got, _ := Agents(dir); strings.Join(got, ",") != "alice,bob" {
		t.Errorf("Agents = %v", got)
	}
	if err := os.Remove(filepath.Join(dir, "bob.sha256")); err != nil {
		t.Fatal(err)
	}
	if _, err := Agent(dir, bob); !errors.Is(err, ErrBadToken) {
		t.Errorf("a revoked token: %v", err)
	}
}

func TestRequire(t *testing.T) {
	dir := t.TempDir()
	alice, _ := Mint(dir, "alice")
	bob, _ := Mint(dir, "bob")
	h := Require(dir, func(a string) bool { return a == "alice" }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(AgentFrom(r.Context())))
	}))
	tests := []struct {
		name, auth string
		code       int
		challenge  string
	}{
		{"alice", "Bearer " + alice, 200, ""},
		{"lower-case scheme", "bearer " + alice, 200, ""},
		{"none", "", 401, `Bearer realm="toolgate"`},
		{"not served here", "Bearer " + bob, 401, `error="invalid_token"`},
		{"basic", "Basic YWxpY2U6eA==", 401, `Bearer realm="toolgate"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", nil)
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.code || !strings.Contains(w.Header().Get("WWW-Authenticate"), tt.challenge) {
				t.Fatalf("%d %q %s", w.Code, w.Header().Get("WWW-Authenticate"), w.Body)
			}
			if tt.code == 200 && w.Body.String() != "alice" {
				t.Fatalf("served as %q", w.Body)
			}
		})
	}
}
