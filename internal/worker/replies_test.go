package worker

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	for _, tt := range []struct {
		name, data, status string
		seq                uint64
		fails              bool
	}{
		{name: "plain", data: `{"stream":"TOOLGATE_RESULTS","seq":42}`, seq: 42},
		{name: "duplicate", data: `{"stream":"TOOLGATE_RESULTS","seq":42,"duplicate":true}`, seq: 42},
		{name: "domain", data: `{"stream":"KV_toolgate_calls","seq":7,"domain":"hub"}`, seq: 7},
		{name: "other order", data: `{"seq":9,"stream":"S"}`, seq: 9},
		{name: "spaces", data: `{ "stream": "S", "seq": 10 }`, seq: 10},
		{name: "wrong last sequence", data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_toolgate_calls","seq":0}`, fails: true},
		{name: "error first", data: `{"stream":"S","error":{"code":503,"description":"no"},"seq":3}`, fails: true},
		{name: "no sequence", data: `{"stream":"S"}`, fails: true},
		{name: "zero sequence", data: `{"stream":"S","seq":0}`, fails: true},
		{name: "not json", data: `+OK`, fails: true},
		{name: "no responders", status: "503", fails: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &nats.Msg{Data: []byte(tt.data), Header: nats.Header{}}
			if tt.status != "" {
				m.Header.Set("Status", tt.status)
			}
			seq, err := parsePubAck(m)
			if tt.fails {
				if err == nil {
					t.Fatalf("seq %d, want an error", seq)
				}
				if tt.name == "wrong last sequence" && !errors.Is(err, jetstream.ErrKeyExists) {
					t.Fatalf("err %v: the server's refusal is not recognised as a taken key", err)
				}
				return
			}
			if err != nil || seq != tt.seq {
				t.Fatalf("seq %d, err %v; want %d", seq, err, tt.seq)
			}
		})
	}
}

// FuzzAckSeq: the shortcut never says a sequence the acknowledgement, as
// JSON, does not say, and never one of an acknowledgement that carries an
// error.
func FuzzAckSeq(f *testing.F) {
	for _, s := range []string{`{"stream":"S","seq":1}`, `{"stream":"S","seq":12,"duplicate":true}`,
		`{"stream":"S","seq":1x}`, `{"stream":"a,\"seq\":5","seq":6}`, `{"stream":"S","seq":3,"error":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ok := ackSeq(b)
		if !ok {
			return
		}
		var a pubAck
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("shortcut read %d from invalid JSON %q", seq, b)
		}
		if a.Error != nil || a.Sequence != seq {
			t.Fatalf("shortcut read %d from %q; JSON says seq %d, error %v", seq, b, a.Sequence, a.Error)
		}
	})
}
