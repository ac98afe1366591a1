package policy

import (
	_ "embed"
	"sync"
)

//go:embed default.yaml
var defaultYAML []byte

var (
	defaultOnce   sync.Once
	defaultPolicy *Policy
)

// Default returns the built-in policy used when none is configured: the
// seed 002 classification of shell commands (read-only commands run,
// dangerous ones and git writes ask, forbidden ones are denied), file tools
// allowed inside the workspace, repository configuration and hooks
// protected from writes, and every other tool asked about.
func Default() *Policy {
	defaultOnce.Do(func() {
		p, _, err := Parse(defaultYAML, "builtin:default")
		if err != nil {
			// The built-in document is tested; should it ever fail, deny
			// everything rather than run without a policy.
			p, _, _ = Parse([]byte("default: deny\nexec: {security: deny, ask: off}\n"), "builtin:deny")
		}
		defaultPolicy = p
	})
	return defaultPolicy
}

// DefaultDocument returns the text of the built-in policy.
func DefaultDocument() []byte { return append([]byte(nil), defaultYAML...) }
