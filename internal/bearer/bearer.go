// Package bearer is how toolgate's HTTP faces (the MCP Streamable HTTP
// face of a worker, toolctl hook serve) know who is calling: a bearer
// token per agent, minted by toolctl, kept only as its SHA-256 in a
// directory of the state directory (files 0600, directory 0700), checked
// in constant time on every request.
//
// A token reads tg1.<agent>.<secret>: the agent names the one hash file
// to compare against (<dir>/<agent>.sha256), the secret is 32 random
// bytes. Deleting the file revokes the token at the next request;
// minting again replaces it.
package bearer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/internal/identity"
)

// Errors callers branch on.
var (
	// ErrNoToken reports a request without a bearer token.
	ErrNoToken = errors.New("no bearer token")
	// ErrBadToken reports a token that is not a current token of its agent.
	ErrBadToken = errors.New("invalid bearer token")
)

const (
	prefix = "tg1"
	suffix = ".sha256"
)

// DefaultDir is the token directory of the calling user's state directory.
func DefaultDir() (string, error) {
	dir, err := identity.StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "tokens"), nil
}

// Mint makes a new token for agent, stores its hash in dir (replacing the
// agent's previous token) and returns the token: the only time it exists
// in clear.
func Mint(dir, agent string) (string, error) {
	if err := identity.ValidName(agent); err != nil {
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := prefix + "." + agent + "." + base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(tok))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("token directory: %w", err)
	}
	path := filepath.Join(dir, agent+suffix)
	if err := identity.WriteFile(path, []byte(hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("token of %s: %w", agent, err)
	}
	return tok, nil
}

// Agent returns the agent a token in dir authenticates.
func Agent(dir, token string) (string, error) {
	if token == "" {
		return "", ErrNoToken
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != prefix || identity.ValidName(parts[1]) != nil {
		return "", fmt.Errorf("%w: not a toolgate token", ErrBadToken)
	}
	agent := parts[1]
	b, err := os.ReadFile(filepath.Join(dir, agent+suffix))
	if err != nil {
		return "", fmt.Errorf("%w: agent %s has no token", ErrBadToken, agent)
	}
	want, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(want) != sha256.Size {
		return "", fmt.Errorf("%w: the stored hash of agent %s is damaged", ErrBadToken, agent)
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return "", fmt.Errorf("%w: not agent %s's current token", ErrBadToken, agent)
	}
	return agent, nil
}

// Agents lists the agents holding a token in dir, sorted; none when dir
// does not exist.
func Agents(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("token directory: %w", err)
	}
	var out []string
	for _, e := range es {
		if a, ok := strings.CutSuffix(e.Name(), suffix); ok && e.Type().IsRegular() && identity.ValidName(a) == nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// Holders returns the token directory (dir, else DefaultDir) and the
// agents holding a token in it.
func Holders(dir string) (string, []string, error) {
	if dir == "" {
		d, err := DefaultDir()
		if err != nil {
			return "", nil, err
		}
		dir = d
	}
	agents, err := Agents(dir)
	return dir, agents, err
}

// FromRequest is the token of an Authorization: Bearer header.
func FromRequest(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

type ctxKey struct{}

// AgentFrom is the agent Require authenticated for the request of ctx.
func AgentFrom(ctx context.Context) string {
	a, _ := ctx.Value(ctxKey{}).(string)
	return a
}

// Require serves next only requests carrying a current token of dir whose
// agent allow accepts (nil accepts every agent), with the agent in the
// request's context (AgentFrom). Any other request gets 401 and a
// WWW-Authenticate challenge (RFC 6750), before its body is read.
func Require(dir string, allow func(agent string) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent, err := Agent(dir, FromRequest(r))
		if err == nil && allow != nil && !allow(agent) {
			err = fmt.Errorf("%w: agent %s is not served here", ErrBadToken, agent)
		}
		if err != nil {
			Challenge(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, agent)))
	})
}

// Challenge answers 401 for err with the WWW-Authenticate header: no
// error code when no token came, invalid_token otherwise.
func Challenge(w http.ResponseWriter, err error) {
	v := `Bearer realm="toolgate"`
	if !errors.Is(err, ErrNoToken) {
		v += `, error="invalid_token", error_description="` + strings.ReplaceAll(err.Error(), `"`, `'`) + `"`
	}
	w.Header().Set("WWW-Authenticate", v)
	http.Error(w, "unauthorized: "+err.Error()+" (send Authorization: Bearer TOKEN; mint one with `toolctl creds token AGENT`)", http.StatusUnauthorized)
}
