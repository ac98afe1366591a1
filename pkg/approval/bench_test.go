package approval

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// args1K is a 1 KiB arguments object like an edit call's.
var args1K = json.RawMessage(fmt.Sprintf(`{"path":"src/main.go","old_string":%q,"new_string":%q,"replace_all":false}`,
	strings.Repeat("x", 480), strings.Repeat("y", 480)))

func BenchmarkArgsHash1KiB(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(args1K)))
	for b.Loop() {
		_ = ArgsHash("agent-1", "edit", args1K)
	}
}

func BenchmarkDecisionVerify(b *testing.B) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	d := &Decision{CallID: "c1", ArgsSHA256: ArgsHash("agent-1", "edit", args1K), Outcome: Approve, Approver: "alice", DecidedAt: time.Now()}
	if err := d.Sign(kp); err != nil {
		b.Fatal(err)
	}
	trusted := KeySet{pub: true}
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Verify(trusted.Trusted); err != nil {
			b.Fatal(err)
		}
	}
}
