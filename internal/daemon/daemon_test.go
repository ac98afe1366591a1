package daemon

import (
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

func TestNetworkOnlyWhenThePolicyNamesIt(t *testing.T) {
	cases := []struct {
		name, doc, agent string
		want             bool
	}{
		{"built-in policy", "", "a", false},
		{"kinds.network allow", "kinds:\n  network: allow\n", "a", true},
		{"allow list names the kind", "allow: [\"kind:network\"]\n", "a", true},
		{"default allow is not a grant", "tools:\n  default: allow\n", "a", false},
		{"overlay grants its agents", "agents:\n  \"net-*\":\n    kinds:\n      network: allow\n", "net-1", true},
		{"overlay grants no one else", "agents:\n  \"net-*\":\n    kinds:\n      network: allow\n", "other", false},
		{"network denied", "kinds:\n  network: deny\n", "a", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p *policy.Policy
			if tc.doc != "" {
				var err error
				if p, _, err = policy.Parse([]byte(tc.doc), tc.name); err != nil {
					t.Fatal(err)
				}
			}
			if got := networkGranted(policy.NewGate(p), &tools.Call{Agent: tc.agent}); got != tc.want {
				t.Fatalf("networkGranted = %v, want %v", got, tc.want)
			}
		})
	}
}
