package worker

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/toolgate/toolgate/pkg/events"
)

// CallKey is the calls-bucket key of a call: the agent and the call id when
// the id is a safe key token, else a hash of it.
func CallKey(agent, id string) string {
	if safeKey(id) {
		return agent + "." + id
	}
	sum := sha256.Sum256([]byte(id))
	return agent + ".h" + hex.EncodeToString(sum[:16])
}

func safeKey(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=') {
			return false
		}
	}
	return true
}

func tokenOr(s, def string) string {
	if events.ValidToken(s) != nil {
		return def
	}
	return s
}
