package events

import (
	"crypto/sha256"
	"encoding/hex"
)

// AgentKey is the key of the entry id owned by agent: agent and id when id
// is a safe key token (letters, digits, '-', '_' and '=', at most 200
// bytes), else agent, ".h" and the hex of the first 16 bytes of the
// SHA-256 of id, so an id the agent chose can never add key tokens or
// wildcards. The id of every event a worker makes for a call starts with
// AgentKey(agent, call id) and ':' (see pkg/eventsig).
func AgentKey(agent, id string) string {
	if safeKey(id) {
		return agent + "." + id
	}
	sum := sha256.Sum256([]byte(id))
	return agent + ".h" + hex.EncodeToString(sum[:16])
}

// safeKey reports whether s can stand as one key token as it is.
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
