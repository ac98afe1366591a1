package identity

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/trust"
)

// Creds are one identity's credentials: a user JWT and the user's nkey
// (trust.Creds).
type Creds = trust.Creds

// LoadCreds reads a .creds file.
func LoadCreds(path string) (*Creds, error) { return trust.LoadCreds(path) }

// ParseCreds parses the content of a .creds file. Errors never quote it.
func ParseCreds(data []byte) (*Creds, error) { return trust.ParseCreds(data) }

// Mint issues a user of role named name, signed by the key of its
// account (the agents account for an agent, else the toolgate account), and returns it as a standard NATS .creds file (what the nats CLI
// and every NATS client library read). The file holds a secret.
func (in *Install) Mint(role Role, name string) ([]byte, error) {
	return in.MintExpiring(role, name, 0)
}

// MintExpiring is Mint with a user JWT that expires after ttl (none
// when ttl is 0).
func (in *Install) MintExpiring(role Role, name string, ttl time.Duration) ([]byte, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return nil, err
	}
	if err := ValidName(name); err != nil {
		return nil, err
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	uc.Tags.Add(role.Tag())
	if role == RoleAgent {
		uc.Tags.Add(ServicesTagPrefix + in.AccountPublicKey)
	}
	uc.Permissions = Permissions(role, name)
	if ttl > 0 {
		uc.Expires = time.Now().Add(ttl).Unix()
	}
	enc, err := uc.Encode(in.accountOf(role))
	if err != nil {
		return nil, fmt.Errorf("issue %s %s: %w", role, name, err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(enc, seed)
}

// accountOf is the key of the account role's users belong to.
func (in *Install) accountOf(role Role) nkeys.KeyPair {
	if role == RoleAgent {
		return in.Agents
	}
	return in.Account
}

// SigningJWT returns the user JWT a worker's signed events carry
// (toolgatesigner) in place of the JWT of its credentials c, which this
// install issued: for the same key, naming the same identity (name, role
// tag, expiry), issued by the same account, and permitting nothing on the
// bus (publish and subscribe denied), so that it vouches for the key and
// opens no connection to anything. The credentials' own JWT lists every
// subject its role may use and is over three times as long; every result
// and audit event carries its signer's JWT in a header, which the server
// scans once for each header it looks for as it stores the event.
func (in *Install) SigningJWT(c *Creds) (string, error) {
	if c == nil || c.Claims == nil {
		return "", fmt.Errorf("%w: no credentials to sign for", ErrWrongIdentity)
	}
	issuer := in.accountOf(c.Role)
	if pub, _ := issuer.PublicKey(); c.Claims.Issuer != pub || c.Claims.IssuerAccount != "" {
		return "", fmt.Errorf("%w: %s were not issued by this install's account", ErrWrongIdentity, c)
	}
	uc := jwt.NewUserClaims(c.Claims.Subject)
	uc.Name = c.Claims.Name
	uc.Tags = append(jwt.TagList(nil), c.Claims.Tags...)
	uc.Expires, uc.NotBefore = c.Claims.Expires, c.Claims.NotBefore
	uc.Pub.Deny.Add(">")
	uc.Sub.Deny.Add(">")
	enc, err := uc.Encode(issuer)
	if err != nil {
		return "", fmt.Errorf("issue the signing JWT of %s: %w", c, err)
	}
	return enc, nil
}

// MintCreds is Mint, parsed: the credentials in memory.
func (in *Install) MintCreds(role Role, name string) (*Creds, error) {
	b, err := in.Mint(role, name)
	if err != nil {
		return nil, err
	}
	return ParseCreds(b)
}

// Resolve finds the credentials a client of role uses: the file path
// when given (a --creds flag), else $TOOLGATE_CREDS, else credentials
// minted in memory from the calling user's install for role and name.
// A file whose role is not role is refused, as is an agent file whose
// name differs from a non-empty name.
func Resolve(path string, role Role, name string) (*Creds, error) {
	if path == "" {
		path = os.Getenv(EnvCreds)
	}
	if path != "" {
		c, err := LoadCreds(path)
		if err != nil {
			return nil, err
		}
		if c.Role != role {
			return nil, fmt.Errorf("%w: %s are for %s %q, this needs %s credentials", ErrWrongIdentity, path, c.Role, c.Name, role)
		}
		if role == RoleAgent && name != "" && c.Name != name {
			return nil, fmt.Errorf("%w: %s are for agent %q, not %q", ErrWrongIdentity, path, c.Name, name)
		}
		return c, nil
	}
	in, err := LoadInstall()
	if err != nil {
		return nil, err
	}
	return in.MintCreds(role, name)
}
