package trust

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// EnvCreds names a credentials file every client uses when no --creds is given.
const EnvCreds = "TOOLGATE_CREDS"

// ErrBadCreds reports a credentials file that is not a toolgate user's.
var ErrBadCreds = errors.New("invalid credentials")

// Creds are one identity's credentials: a user JWT issued by the
// toolgate account and the user's nkey.
type Creds struct {
	// JWT is the encoded user JWT.
	JWT string
	// Claims are JWT decoded (not verified against any trust chain: the
	// server does that; Issuer is checked to be an account key).
	Claims *jwt.UserClaims
	// Key is the user's nkey; it signs the server's nonce.
	Key nkeys.KeyPair
	// Role is the role named by the JWT's toolgate-role tag.
	Role Role
	// Name is the identity's name (an agent's name is its subject token).
	Name string
	// Account is the public key of the account that issued the JWT.
	Account string
	// Services is the public key of the account whose services (workers,
	// approvers, admins) this identity deals with: the issuer for the
	// toolgate account's roles; for an agent, the toolgate account its
	// JWT names (ServicesTagPrefix), since agents are issued by the agents
	// account. A reader of signed results and policies trusts this one.
	Services string
	// Path is the file the credentials were read from; empty when minted
	// in memory.
	Path string
}

// LoadCreds reads a .creds file.
func LoadCreds(path string) (*Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	c, err := ParseCreds(b)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// ParseCreds parses the content of a .creds file. Errors never quote it.
func ParseCreds(data []byte) (*Creds, error) {
	tok, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return nil, fmt.Errorf("%w: no user JWT", ErrBadCreds)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return nil, fmt.Errorf("%w: user JWT does not decode", ErrBadCreds)
	}
	kp, err := jwt.ParseDecoratedUserNKey(data)
	if err != nil {
		return nil, fmt.Errorf("%w: no user nkey seed", ErrBadCreds)
	}
	pub, err := kp.PublicKey()
	if err != nil || pub != uc.Subject {
		return nil, fmt.Errorf("%w: the nkey seed is not the JWT's user", ErrBadCreds)
	}
	issuer := uc.Issuer
	if uc.IssuerAccount != "" {
		issuer = uc.IssuerAccount
	}
	if !nkeys.IsValidPublicAccountKey(issuer) {
		return nil, fmt.Errorf("%w: issuer is not an account key", ErrBadCreds)
	}
	c := &Creds{JWT: tok, Claims: uc, Key: kp, Name: uc.Name, Account: issuer, Services: issuer}
	for _, t := range uc.Tags {
		// Tags are stored lower-cased; account keys are upper-case base32.
		if a, ok := strings.CutPrefix(t, ServicesTagPrefix); ok && nkeys.IsValidPublicAccountKey(strings.ToUpper(a)) {
			c.Services = strings.ToUpper(a)
		}
		if r, ok := strings.CutPrefix(t, RoleTagPrefix); ok {
			if c.Role, err = ParseRole(r); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadCreds, err)
			}
		}
	}
	if c.Role == "" {
		return nil, fmt.Errorf("%w: user %q has no %s tag (not issued by toolgate)", ErrBadCreds, uc.Name, RoleTagPrefix)
	}
	if err := ValidName(c.Name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCreds, err)
	}
	return c, nil
}

// InboxPrefix is the inbox prefix these credentials must use.
func (c *Creds) InboxPrefix() string { return InboxPrefix(c.Role, c.Name) }

// NATSOptions are the nats.Connect options that authenticate with c and
// use its inbox prefix.
func (c *Creds) NATSOptions() []nats.Option {
	return []nats.Option{
		nats.UserJWT(func() (string, error) { return c.JWT, nil },
			func(nonce []byte) ([]byte, error) { return c.Key.Sign(nonce) }),
		nats.CustomInboxPrefix(c.InboxPrefix()),
	}
}

// String names the identity, never its secret.
func (c *Creds) String() string { return string(c.Role) + " " + strconv.Quote(c.Name) }

// Bytes returns c as .creds file content.
func (c *Creds) Bytes() ([]byte, error) {
	seed, err := c.Key.Seed()
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(c.JWT, seed)
}

// SignerOf is the signer of credentials c: their key, presenting their
// user JWT.
func SignerOf(c *Creds) Signer { return Signer{Key: c.Key, JWT: c.JWT} }
