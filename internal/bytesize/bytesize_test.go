package bytesize

import (
	"errors"
	"flag"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  bool
	}{
		{"8GiB", 8 << 30, false},
		{"8gib", 8 << 30, false},
		{"8G", 8 << 30, false},
		{"512MiB", 512 << 20, false},
		{"1.5KiB", 1536, false},
		{"1GB", 1e9, false},
		{"100kb", 100e3, false},
		{"1048576", 1 << 20, false},
		{"-1", -1, false},
		{" 2 MiB ", 2 << 20, false},
		{"0", 0, false},
		{"9223372036854775807", 1<<63 - 1, false},
		{"1.3B", 0, true}, // not whole bytes
		{"16EiB", 0, true},
		{"8PiB", 0, true},
		{"lots", 0, true},
		{"", 0, true},
		{"GiB", 0, true},
		{"0x10", 0, true},
		{"NaN", 0, true},
		{"Inf", 0, true},
		{"1e30", 0, true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.err {
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("Parse(%q) = %d, %v; want an error wrapping ErrSyntax", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestString(t *testing.T) {
	for in, want := range map[Size]string{8 << 30: "8GiB", 1536: "1536B", 3 << 10: "3KiB", 100: "100B", 0: "0B", -1: "-1B", 1 << 40: "1TiB", 16384: "16KiB"} {
		if got := in.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(in), got, want)
		}
	}
}

// A size flag takes units, and -help shows its default in them.
func TestFlag(t *testing.T) {
	mem, max := int64(8<<30), 1<<20
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(Var(&mem), "bash-memory", "memory")
	fs.Var(Var(&max), "max-payload", "payload")
	if f := fs.Lookup("bash-memory"); f.DefValue != "8GiB" {
		t.Errorf("default shown as %q", f.DefValue)
	}
	if err := fs.Parse([]string{"--bash-memory", "512MiB", "--max-payload=64KiB"}); err != nil {
		t.Fatal(err)
	}
	if mem != 512<<20 || max != 64<<10 {
		t.Fatalf("mem %d max %d", mem, max)
	}
	if err := fs.Parse([]string{"--bash-memory", "much"}); err == nil {
		t.Fatal("a bad size was accepted")
	}
}

// Whatever Parse accepts prints and parses back to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"8GiB", "1.5KiB", "-1", "1GB", "12", "0.5g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(n.String())
		if err != nil || back != n {
			t.Fatalf("Parse(%q) = %d prints %q, which parses to %d, %v", s, n, n.String(), back, err)
		}
	})
}
