package tools_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/pkg/tools"
)

func TestArgReaders(t *testing.T) {
	args := map[string]any{
		"s": "text", "n": json.Number("42"), "f": json.Number("2.9"), "fl": float64(7),
		"i": 3, "bad": json.Number("x"), "b": true, "list": []any{"a", 1, "b"}, "str_num": "5",
	}
	for _, tc := range []struct {
		keys   []string
		want   int64
		wantOK bool
	}{
		{[]string{"n"}, 42, true},
		{[]string{"f"}, 2, true},
		{[]string{"fl"}, 7, true},
		{[]string{"i"}, 3, true},
		{[]string{"bad"}, 0, false},
		{[]string{"str_num"}, 0, false},
		{[]string{"missing"}, 0, false},
		{[]string{"missing", "s", "n"}, 42, true},
	} {
		if got, ok := tools.ArgInt(args, tc.keys...); got != tc.want || ok != tc.wantOK {
			t.Errorf("ArgInt(%v) = %d, %v; want %d, %v", tc.keys, got, ok, tc.want, tc.wantOK)
		}
	}
	if got := tools.ArgString(args, "s"); got != "text" {
		t.Errorf("ArgString(s) = %q", got)
	}
	if got := tools.ArgString(args, "n"); got != "" {
		t.Errorf("ArgString(n) = %q, want empty for a number", got)
	}
	if !tools.ArgBool(args, "missing", "b") || tools.ArgBool(args, "s") {
		t.Error("ArgBool reads wrongly")
	}
	if got := tools.ArgStrings(args, "list"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("ArgStrings(list) = %q", got)
	}
	if got := tools.ArgStrings(args, "s"); got != nil {
		t.Errorf("ArgStrings(s) = %q, want nil", got)
	}
}
