package trust

import "github.com/toolgate/toolgate/internal/identity"

// SignerOf is the signer of credentials c: their key, presenting their
// user JWT.
func SignerOf(c *identity.Creds) Signer { return Signer{Key: c.Key, JWT: c.JWT} }
