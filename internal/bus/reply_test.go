package bus

import "testing"

func TestReplyAllowed(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  bool
	}{
		{"_INBOX.admin.admin.abc.1", true},
		{"_INBOX.worker.w.x", true},
		{"_INBOX_alice.abc", true},
		{"_R_.kXbNZ4.aH7KgD", true},
		{"", false},
		{"_INBOX.", false},
		{"_R_.", false},
		{"toolgate.result.bob.c1", false},
		{"toolgate.cancel.bob.c1", false},
		{"$KV.toolgate_policy.policy", false},
		{"$KV.toolgate_budgets.x", false},
		{"toolgate.audit.bob.bash", false},
		{"$JS.API.STREAM.INFO.X", false},
		{"_INBOXx.y", false},
	} {
		if got := ReplyAllowed(tc.reply); got != tc.want {
			t.Errorf("ReplyAllowed(%q) = %v, want %v", tc.reply, got, tc.want)
		}
	}
}
