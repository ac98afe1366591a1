package loopback

import "testing"

func TestHost(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"localhost", true}, {"LOCALHOST:8471", true}, {"127.0.0.1", true}, {"127.0.0.1:80", true},
		{"127.9.9.9:1", true}, {"[::1]:8471", true}, {"::1", true},
		{"example.com", false}, {"localhost.example.com:80", false}, {"10.0.0.1:8471", false},
		{"[::2]:1", false}, {"", false}, {"127.0.0.1.nip.io", false},
	} {
		if got := Host(tt.in); got != tt.want {
			t.Errorf("Host(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
