package trust

import (
	"fmt"
	"os"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// LoadCreds reads a standard NATS .creds file (a user JWT and its nkey
// seed) into a Signer. The seed never appears in an error.
func LoadCreds(path string) (Signer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Signer{}, fmt.Errorf("credentials: %w", err)
	}
	return ParseCreds(raw, path)
}

// ParseCreds reads the contents of a .creds file; name is used in errors.
func ParseCreds(raw []byte, name string) (Signer, error) {
	tok, err := jwt.ParseDecoratedJWT(raw)
	if err != nil || tok == "" {
		return Signer{}, fmt.Errorf("credentials %s: no user JWT", name)
	}
	kp, err := jwt.ParseDecoratedUserNKey(raw)
	if err != nil {
		return Signer{}, fmt.Errorf("credentials %s: no user nkey seed", name)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return Signer{}, fmt.Errorf("credentials %s: user JWT: %v", name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil || pub != uc.Subject {
		return Signer{}, fmt.Errorf("credentials %s: the seed is not the key of the JWT (%s)", name, uc.Subject)
	}
	return Signer{Key: kp, JWT: tok}, nil
}

// Issuer is the account that issued the signer's JWT: what a process that
// holds these credentials trusts by default.
func (s Signer) Issuer() (string, error) {
	if s.JWT == "" {
		return "", fmt.Errorf("credentials: no user JWT")
	}
	uc, err := jwt.DecodeUserClaims(s.JWT)
	if err != nil {
		return "", fmt.Errorf("credentials: user JWT: %w", err)
	}
	if !nkeys.IsValidPublicAccountKey(uc.Issuer) {
		return "", fmt.Errorf("credentials: JWT issuer %q is not an account key", uc.Issuer)
	}
	return uc.Issuer, nil
}
