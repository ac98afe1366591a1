package approver

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/trust"
)

// ErrBadTokenFile reports a token file line that is not `<identity> <token>`.
var ErrBadTokenFile = errors.New("bad token file")

// Tokens maps approver tokens to the identities they authenticate.
type Tokens struct {
	byHash map[[32]byte]string // sha256(token) → identity
}

// ParseTokens reads one `<identity> <token>` per line; blank lines and
// lines starting with '#' are skipped. name is used in error messages.
func ParseTokens(r io.Reader, name string) (*Tokens, error) {
	t := &Tokens{byHash: map[[32]byte]string{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: %s:%d: want `<identity> <token>`, got %d fields", ErrBadTokenFile, name, n, len(f))
		}
		if trust.Fold(f[0]) == "" {
			return nil, fmt.Errorf("%w: %s:%d: identity %q has no letter or digit", ErrBadTokenFile, name, n, f[0])
		}
		if len(f[1]) < 16 {
			return nil, fmt.Errorf("%w: %s:%d: token of %q is shorter than 16 characters", ErrBadTokenFile, name, n, f[0])
		}
		h := sha256.Sum256([]byte(f[1]))
		if other, dup := t.byHash[h]; dup {
			return nil, fmt.Errorf("%w: %s:%d: token of %q is also the token of %q", ErrBadTokenFile, name, n, f[0], other)
		}
		t.byHash[h] = f[0]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadTokenFile, name, err)
	}
	if len(t.byHash) == 0 {
		return nil, fmt.Errorf("%w: %s: no tokens", ErrBadTokenFile, name)
	}
	return t, nil
}

// LoadTokens reads a token file.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	return ParseTokens(f, path)
}

// Identity returns the identity token authenticates.
func (t *Tokens) Identity(token string) (string, bool) {
	if t == nil || token == "" {
		return "", false
	}
	h := sha256.Sum256([]byte(token))
	var found string
	for k, id := range t.byHash { // constant work whatever matches
		if subtle.ConstantTimeCompare(k[:], h[:]) == 1 {
			found = id
		}
	}
	return found, found != ""
}

// fingerprint is a short hash of identity's token, so a session ends when
// its token is removed or changed.
func (t *Tokens) fingerprint(identity string) string {
	for k, id := range t.byHash {
		if id == identity {
			return hex.EncodeToString(k[:8])
		}
	}
	return ""
}

// EnsureTokenFile creates path with one random token for identity when it
// does not exist, for the zero-config setup, and reports whether it did.
func EnsureTokenFile(path, identity string) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, fmt.Errorf("token file: %w", err)
	}
	line := fmt.Sprintf("# approver tokens: <identity> <token>, one per line\n%s %s\n", identity, randomString(24))
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return false, fmt.Errorf("token file: %w", err)
	}
	return true, nil
}

// LoadOrCreateKey returns the approver's nkey user key pair from
// dir/approver.nk, creating the key (and dir) on first start.
func LoadOrCreateKey(dir string) (nkeys.KeyPair, error) {
	path := filepath.Join(dir, "approver.nk")
	if seed, err := os.ReadFile(path); err == nil {
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return nil, fmt.Errorf("approver key %s: %w", path, err)
		}
		if pub, _ := kp.PublicKey(); !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("approver key %s: not a user key", path)
		}
		return kp, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("approver key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("approver key: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("approver key: %w", err)
	}
	seed, _ := kp.Seed()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("approver key: %w", err)
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return nil, fmt.Errorf("approver key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("approver key: %w", err)
	}
	return kp, nil
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// session is what the signed session cookie holds.
type session struct {
	Identity string `json:"id"`
	Expires  int64  `json:"exp"`
	Token    string `json:"tfp"`  // fingerprint of the token that logged in
	CSRF     string `json:"csrf"` // echoed in X-CSRF-Token by the page
}

// sessions signs and checks session cookies with a key derived from the
// approver's seed, so sessions survive a restart of the approver.
type sessions struct {
	key    []byte
	tokens *Tokens
	ttl    time.Duration
}

func (s *sessions) issue(identity string, now time.Time) (string, session) {
	sess := session{Identity: identity, Expires: now.Add(s.ttl).Unix(), Token: s.tokens.fingerprint(identity), CSRF: randomString(18)}
	raw, _ := json.Marshal(sess)
	body := base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + s.mac(body), sess
}

func (s *sessions) check(cookie string, now time.Time) (session, bool) {
	body, mac, ok := strings.Cut(cookie, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(s.mac(body))) {
		return session{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return session{}, false
	}
	var sess session
	if json.Unmarshal(raw, &sess) != nil || now.Unix() >= sess.Expires || sess.Token == "" ||
		sess.Token != s.tokens.fingerprint(sess.Identity) {
		return session{}, false
	}
	return sess, true
}

func (s *sessions) mac(body string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(body))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
