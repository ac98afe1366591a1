package approval

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"
)

// Errors of signature checks, for errors.Is.
var (
	// ErrBadSignature: the signature does not verify under the public key.
	ErrBadSignature = errors.New("bad decision signature")
	// ErrUntrustedKey: the decision is signed by a key not trusted to approve.
	ErrUntrustedKey = errors.New("untrusted approver key")
)

// SigningBytes is what a decision's signature covers: the canonical JSON of
// the decision with an empty signature.
func (d *Decision) SigningBytes() ([]byte, error) {
	c := *d
	c.Signature = ""
	raw, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode decision: %w", err)
	}
	return Canonical(raw)
}

// Sign sets DecidedAt (to now, in UTC, if zero), PublicKey and Signature
// with kp, an nkey user key pair holding its seed.
func (d *Decision) Sign(kp nkeys.KeyPair) error {
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("sign decision: public key: %w", err)
	}
	if d.DecidedAt.IsZero() {
		d.DecidedAt = time.Now()
	}
	d.DecidedAt = d.DecidedAt.UTC()
	d.PublicKey = pub
	msg, err := d.SigningBytes()
	if err != nil {
		return err
	}
	sig, err := kp.Sign(msg)
	if err != nil {
		return fmt.Errorf("sign decision: %w", err)
	}
	d.Signature = base64.RawURLEncoding.EncodeToString(sig)
	return nil
}

// Verify checks that the decision is signed by PublicKey and that trusted
// reports that key as trusted. It fails closed: a nil trusted trusts
// nothing.
func (d *Decision) Verify(trusted func(publicKey string) bool) error {
	if err := d.VerifySignature(); err != nil {
		return err
	}
	if trusted == nil || !trusted(d.PublicKey) {
		return fmt.Errorf("%w: %s", ErrUntrustedKey, d.PublicKey)
	}
	return nil
}

// VerifySignature checks that the decision is signed by PublicKey; whether
// that key may approve is the caller's judgement.
func (d *Decision) VerifySignature() error {
	if d.PublicKey == "" || d.Signature == "" {
		return fmt.Errorf("%w: decision is not signed", ErrBadSignature)
	}
	kp, err := nkeys.FromPublicKey(d.PublicKey)
	if err != nil {
		return fmt.Errorf("%w: public key %q: %v", ErrBadSignature, d.PublicKey, err)
	}
	if !nkeys.IsValidPublicUserKey(d.PublicKey) {
		return fmt.Errorf("%w: %q is not a user public key", ErrBadSignature, d.PublicKey)
	}
	sig, err := base64.RawURLEncoding.DecodeString(d.Signature)
	if err != nil {
		return fmt.Errorf("%w: signature is not base64url: %v", ErrBadSignature, err)
	}
	msg, err := d.SigningBytes()
	if err != nil {
		return err
	}
	if err := kp.Verify(msg, sig); err != nil {
		return fmt.Errorf("%w: key %s: %v", ErrBadSignature, d.PublicKey, err)
	}
	return nil
}

// KeySet is a fixed list of trusted public keys.
type KeySet map[string]bool

// NewKeySet returns the set of keys, refusing any that is not an nkey user
// public key.
func NewKeySet(keys ...string) (KeySet, error) {
	s := KeySet{}
	for i, k := range keys {
		if !nkeys.IsValidPublicUserKey(k) {
			return nil, fmt.Errorf("trusted key %d (%q) is not an nkey user public key (U...)", i, k)
		}
		s[k] = true
	}
	return s, nil
}

// Trusted reports whether k is in the set.
func (s KeySet) Trusted(k string) bool { return s[k] }

// ApproverKey is what an approver service registers in the approvals
// bucket. Registering proves nothing by itself: a worker counts the key
// only when it is pinned in its configuration or when JWT, the approver's
// user JWT, was issued by an account the worker trusts.
type ApproverKey struct {
	// PublicKey is the nkey user public key (U...).
	PublicKey string `json:"public_key"`
	// JWT is the approver's user JWT (role approver), if it has one.
	JWT string `json:"jwt,omitempty"`
	// Name names the approver service (host name or --name).
	Name string `json:"name"`
	// RegisteredAt is when the key was first registered.
	RegisteredAt time.Time `json:"registered_at"`
}
