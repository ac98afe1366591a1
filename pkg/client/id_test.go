package client

import (
	"encoding/base32"
	"strings"
	"testing"
)

// TestCallIDsAreNotGuessable: a call id is 128 random bits, so one
// agent's ids say nothing of another's next one. The ids nuid made
// shared a 12-character prefix within a process and grew by a small
// step: seeing a few let an attacker guess the next in a few hundred
// tries.
func TestCallIDsAreNotGuessable(t *testing.T) {
	seen := map[string]bool{}
	prev := NewCallID()
	shared := 0
	for range 10000 {
		id := NewCallID()
		raw, err := base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding).DecodeString(id)
		if err != nil || len(raw)*8 < 96 {
			t.Fatalf("id %q: %d bits, %v", id, len(raw)*8, err)
		}
		if seen[id] {
			t.Fatalf("id %q twice", id)
		}
		seen[id] = true
		n := 0
		for n < len(id) && id[n] == prev[n] {
			n++
		}
		shared = max(shared, n)
		prev = id
	}
	// Random ids of 5 bits a character: 10000 neighbours share at most a
	// few leading characters by chance.
	if shared >= 6 {
		t.Fatalf("consecutive ids share a %d-character prefix: %s", shared, strings.Repeat("?", shared))
	}
}
