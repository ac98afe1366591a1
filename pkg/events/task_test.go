package events

import (
	"strings"
	"testing"
)

func TestTaskSubjects(t *testing.T) {
	for _, tc := range []struct {
		subject   string
		agent, id string
		wantErr   bool
	}{
		{TaskSubject("helper", "t1"), "helper", "t1", false},
		{TaskResultSubject("helper", "t1"), "helper", "t1", false},
		{TaskProgressSubject("helper", "t1"), "helper", "t1", false},
		{TaskCancelSubject("helper", "t1"), "helper", "t1", false},
		{"toolgate.task.helper", "", "", true},
		{"toolgate.result.helper.t1", "", "", true},
		{"other.task.helper.t1", "", "", true},
		{"toolgate.task.helper.t1.x", "", "", true},
		{"toolgate.task..t1", "", "", true},
		{"toolgate.task.helper.*", "", "", true},
	} {
		agent, id, err := ParseTaskSubject(tc.subject)
		if (err != nil) != tc.wantErr || agent != tc.agent || id != tc.id {
			t.Errorf("ParseTaskSubject(%q) = %q, %q, %v", tc.subject, agent, id, err)
		}
	}
}

func FuzzParseTaskSubject(f *testing.F) {
	for _, s := range []string{"toolgate.task.a.b", "toolgate.task_result.a.b", "toolgate.task..", "", "toolgate.task.a.b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		agent, id, err := ParseTaskSubject(s)
		if err != nil {
			return
		}
		if ValidToken(agent) != nil || ValidToken(id) != nil {
			t.Fatalf("%q parsed into %q %q", s, agent, id)
		}
		if kind := strings.Split(s, ".")[1]; kind+"."+agent+"."+id != strings.TrimPrefix(s, Prefix+".") {
			t.Fatalf("%q does not round-trip: %q %q", s, agent, id)
		}
	})
}
