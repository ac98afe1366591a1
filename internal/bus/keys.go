package bus

import (
	"crypto/sha256"
	"encoding/hex"
)

// AgentKey is the key-value key of the entry id owned by agent (a call in
// the calls bucket, a task in the tasks bucket): agent and id when id is a
// safe key token, else agent and a hash of id, so an id the agent chose
// can never add key tokens or wildcards.
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
