// Package trust decides whose signature counts on the bus: it verifies the
// NATS user JWTs toolgate's account issues (who signed, in which role) and
// the ed25519 seals that decisions, amendments and pushed policies carry,
// against the account keys a process trusts and the keys pinned in its
// configuration. It fails closed: a verifier that trusts nothing refuses
// every signature.
//
// The contract with the credentials toolgate mints: user JWTs
// (github.com/nats-io/jwt/v2) are issued directly by an account key (the
// toolgate account's for every role but the agent, the agents account's
// for agents); their Name is the identity (for agents, the agent name);
// one tag "toolgate-role:<role>" names the role (Role), and an agent's tag
// "toolgate-services:<account>" names the toolgate account whose workers
// answer it. The package reads the .creds files holding such a JWT and
// its nkey (Creds) and finds the local install's account (LocalAccount),
// so that a client needs nothing internal to know whom to trust.
package trust

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Errors of verification, for errors.Is. Every one wraps ErrUntrusted.
var (
	// ErrUntrusted wraps every reason a signature does not count.
	ErrUntrusted = errors.New("untrusted signature")
	// ErrBadSignature: the signature does not verify under its key.
	ErrBadSignature = fmt.Errorf("%w: bad signature", ErrUntrusted)
	// ErrBadJWT: the user JWT does not decode or its own signature fails.
	ErrBadJWT = fmt.Errorf("%w: bad user JWT", ErrUntrusted)
	// ErrForeignIssuer: the JWT was issued by an account not trusted here.
	ErrForeignIssuer = fmt.Errorf("%w: JWT issued by an account not trusted here", ErrUntrusted)
	// ErrExpired: the JWT is expired or not valid yet.
	ErrExpired = fmt.Errorf("%w: JWT expired or not yet valid", ErrUntrusted)
	// ErrWrongRole: the identity's role may not sign this.
	ErrWrongRole = fmt.Errorf("%w: wrong role", ErrUntrusted)
	// ErrKeyMismatch: the JWT is for another key than the one that signed.
	ErrKeyMismatch = fmt.Errorf("%w: JWT subject is not the signing key", ErrUntrusted)
	// ErrUnknownKey: no JWT, and the key is not pinned.
	ErrUnknownKey = fmt.Errorf("%w: key neither pinned nor vouched for by a trusted account", ErrUntrusted)
	// ErrUnsigned: there is no signature at all.
	ErrUnsigned = fmt.Errorf("%w: not signed", ErrUntrusted)
)

// Identity is who signed: a name in a role, and the key.
type Identity struct {
	// Name is the identity's name (the JWT's name, or "pinned:<key>" for a
	// pinned key).
	Name string `json:"name"`
	// Role is the identity's role.
	Role Role `json:"role"`
	// PublicKey is the nkey user public key (U...) that signed.
	PublicKey string `json:"public_key"`
	// Account is the account that issued the JWT; empty for a pinned key.
	Account string `json:"account,omitempty"`
}

// String is "<role>:<name>", the identity's name in its role's namespace.
func (id Identity) String() string { return string(id.Role) + ":" + id.Name }

// Verifier checks JWTs and seals against trusted account keys and pinned
// user keys. The zero value trusts nothing.
type Verifier struct {
	accounts map[string]bool
	pinned   map[string]Role
	now      func() time.Time
}

// NewVerifier trusts user JWTs issued by the account public keys (A...)
// in accounts, and the user public keys (U...) pinned to a role. A key
// pinned to two roles, or a key of the wrong kind, is an error.
func NewVerifier(accounts []string, pinned map[Role][]string) (*Verifier, error) {
	v := &Verifier{accounts: map[string]bool{}, pinned: map[string]Role{}, now: time.Now}
	for i, a := range accounts {
		a = strings.TrimSpace(a)
		if !nkeys.IsValidPublicAccountKey(a) {
			return nil, fmt.Errorf("trusted account %d (%q) is not an nkey account public key (A...)", i, a)
		}
		v.accounts[a] = true
	}
	for role, keys := range pinned {
		for i, k := range keys {
			k = strings.TrimSpace(k)
			if !nkeys.IsValidPublicUserKey(k) {
				return nil, fmt.Errorf("pinned %s key %d (%q) is not an nkey user public key (U...)", role, i, k)
			}
			if other, ok := v.pinned[k]; ok && other != role {
				return nil, fmt.Errorf("key %s is pinned as both %s and %s", k, other, role)
			}
			v.pinned[k] = role
		}
	}
	return v, nil
}

// Empty reports whether v trusts nothing at all.
func (v *Verifier) Empty() bool { return v == nil || (len(v.accounts) == 0 && len(v.pinned) == 0) }

// Accounts lists the trusted account keys.
func (v *Verifier) Accounts() []string {
	if v == nil {
		return nil
	}
	out := make([]string, 0, len(v.accounts))
	for a := range v.accounts {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// UserJWT decodes a user JWT and returns its identity when a trusted
// account issued it, it is in force, and its role is one of roles.
func (v *Verifier) UserJWT(token string, roles ...Role) (Identity, error) {
	uc, err := jwt.DecodeUserClaims(token) // checks the JWT's own signature by its issuer
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrBadJWT, err)
	}
	if v == nil || !v.accounts[uc.Issuer] || (uc.IssuerAccount != "" && uc.IssuerAccount != uc.Issuer) {
		return Identity{}, fmt.Errorf("%w: issuer %s", ErrForeignIssuer, uc.Issuer)
	}
	now := v.now().Unix()
	if (uc.Expires > 0 && now >= uc.Expires) || (uc.NotBefore > 0 && now < uc.NotBefore) {
		return Identity{}, fmt.Errorf("%w: %q", ErrExpired, uc.Name)
	}
	role, err := RoleOf(uc)
	if err != nil {
		return Identity{}, err
	}
	id := Identity{Name: uc.Name, Role: role, PublicKey: uc.Subject, Account: uc.Issuer}
	if strings.TrimSpace(uc.Name) == "" {
		return Identity{}, fmt.Errorf("%w: JWT of %s names no identity", ErrBadJWT, uc.Subject)
	}
	if !slices.Contains(roles, role) {
		return id, fmt.Errorf("%w: %s may not sign this (needs %s)", ErrWrongRole, id, joinRoles(roles))
	}
	return id, nil
}

// RoleOf is the role a user JWT's tags name: exactly one role tag.
func RoleOf(uc *jwt.UserClaims) (Role, error) {
	var found []Role
	for _, t := range uc.Tags {
		if r, ok := strings.CutPrefix(strings.ToLower(t), RoleTagPrefix); ok {
			found = append(found, Role(r))
		}
	}
	switch {
	case len(found) == 0:
		return "", fmt.Errorf("%w: JWT of %q carries no %s tag", ErrWrongRole, uc.Name, RoleTagPrefix+"<role>")
	case len(found) > 1:
		return "", fmt.Errorf("%w: JWT of %q names several roles %v", ErrWrongRole, uc.Name, found)
	}
	switch found[0] {
	case RoleWorker, RoleApprover, RoleAdmin, RoleAgent:
		return found[0], nil
	}
	return "", fmt.Errorf("%w: JWT of %q names unknown role %q", ErrWrongRole, uc.Name, found[0])
}

// Key returns who signed with publicKey, vouched for by userJWT (when not
// empty) or pinned, in one of roles. A JWT that is present must be valid
// and for publicKey even when the key is also pinned.
func (v *Verifier) Key(publicKey, userJWT string, roles ...Role) (Identity, error) {
	if userJWT != "" {
		id, err := v.UserJWT(userJWT, roles...)
		if err != nil {
			return id, err
		}
		if id.PublicKey != publicKey {
			return id, fmt.Errorf("%w: JWT of %s is for %s, signed by %s", ErrKeyMismatch, id, id.PublicKey, publicKey)
		}
		return id, nil
	}
	if v != nil {
		if role, ok := v.pinned[publicKey]; ok {
			id := Identity{Name: "pinned:" + publicKey, Role: role, PublicKey: publicKey}
			if !slices.Contains(roles, role) {
				return id, fmt.Errorf("%w: %s is pinned as %s (needs %s)", ErrWrongRole, publicKey, role, joinRoles(roles))
			}
			return id, nil
		}
	}
	return Identity{}, fmt.Errorf("%w: %s", ErrUnknownKey, publicKey)
}

// Seal is an ed25519 signature over a document by a user key, with the
// signer's user JWT so that any process trusting the issuing account can
// tell who signed.
type Seal struct {
	// PublicKey is the signer's nkey user public key (U...).
	PublicKey string `json:"public_key"`
	// JWT is the signer's user JWT; empty for a pinned key.
	JWT string `json:"jwt,omitempty"`
	// Signature is the base64url (no padding) ed25519 signature.
	Signature string `json:"signature"`
}

// Signer signs with a user key and presents its JWT.
type Signer struct {
	// Key is the user key pair, holding its seed.
	Key nkeys.KeyPair
	// JWT is the key's user JWT; empty when the key is pinned instead.
	JWT string
}

// Sign seals msg.
func (s Signer) Sign(msg []byte) (Seal, error) {
	if s.Key == nil {
		return Seal{}, errors.New("sign: no key")
	}
	pub, err := s.Key.PublicKey()
	if err != nil {
		return Seal{}, fmt.Errorf("sign: public key: %w", err)
	}
	sig, err := s.Key.Sign(msg)
	if err != nil {
		return Seal{}, fmt.Errorf("sign: %w", err)
	}
	return Seal{PublicKey: pub, JWT: s.JWT, Signature: base64.RawURLEncoding.EncodeToString(sig)}, nil
}

// CheckSignature verifies that sig is publicKey's ed25519 signature of msg.
func CheckSignature(publicKey, sig string, msg []byte) error {
	if publicKey == "" || sig == "" {
		return ErrUnsigned
	}
	if !nkeys.IsValidPublicUserKey(publicKey) {
		return fmt.Errorf("%w: %q is not a user public key", ErrBadSignature, publicKey)
	}
	kp, err := nkeys.FromPublicKey(publicKey)
	if err != nil {
		return fmt.Errorf("%w: public key %q: %v", ErrBadSignature, publicKey, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("%w: signature is not base64url: %v", ErrBadSignature, err)
	}
	if err := kp.Verify(msg, raw); err != nil {
		return fmt.Errorf("%w: key %s: %v", ErrBadSignature, publicKey, err)
	}
	return nil
}

// Check verifies seal over msg and returns the signer when it may sign in
// one of roles. A nil seal is ErrUnsigned.
func (v *Verifier) Check(seal *Seal, msg []byte, roles ...Role) (Identity, error) {
	if seal == nil {
		return Identity{}, ErrUnsigned
	}
	if err := CheckSignature(seal.PublicKey, seal.Signature, msg); err != nil {
		return Identity{}, err
	}
	return v.Key(seal.PublicKey, seal.JWT, roles...)
}

func joinRoles(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// Fold is the form in which identity names are compared: Unicode case
// folded, with everything that is not a letter or a digit removed, so
// "Agent-X", "agent_x" and "agentx" are one name. It is deliberately
// coarse: it decides who may not approve whom, and there it must err
// toward "the same".
func Fold(name string) string {
	var b strings.Builder
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			continue
		}
		// The smallest rune of r's fold orbit stands for all of them.
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return b.String()
}

// SameName reports whether two identity names are one under Fold. Names
// with no letter or digit all fold to the empty name, so they are the same
// as each other.
func SameName(a, b string) bool { return Fold(a) == Fold(b) }
