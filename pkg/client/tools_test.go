package client

import "testing"

func TestWithTraceParentTakesOnlyValidValues(t *testing.T) {
	tests := []struct {
		tp   string
		want string
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"00-00000000000000000000000000000000-0000000000000000-00", ""},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX: y", ""},
		{"", ""},
	}
	for _, tt := range tests {
		o := &callOpts{}
		WithTraceContext(tt.tp, "")(o)
		if o.traceparent != tt.want {
			t.Errorf("WithTraceContext(%q) kept %q, want %q", tt.tp, o.traceparent, tt.want)
		}
	}
}
