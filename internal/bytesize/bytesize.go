// Package bytesize reads and writes sizes in bytes the way people write
// them: 8GiB, 512MiB, 1.5GB, 1048576. Flags that take a size use Flag;
// logs and messages print Size.
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrSyntax is wrapped by every error Parse returns.
var ErrSyntax = errors.New("not a size")

// Size is a number of bytes that prints in the largest binary unit that
// keeps it whole (8GiB, 1536KiB, 100B); negative sizes print as numbers.
type Size int64

// units are the suffixes Parse accepts, by multiplier; the binary ones
// (KiB, MiB, ...) are what String prints.
var units = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// Parse reads a size: a number (a fraction too) with an optional unit, in
// any case: B; KiB, MiB, GiB, TiB (powers of 1024, as are K, M, G, T);
// KB, MB, GB, TB (powers of 1000). A bare number is bytes; a negative
// one is kept (flags use it for "no limit"). The result must be whole
// bytes and fit an int64.
func Parse(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil && mult == 1 {
		return Size(n), nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "xXpP_") || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q: %w (want a number of bytes, or one with a unit: 512MiB, 8GiB, 1GB)", s, ErrSyntax)
	}
	v := f * mult
	if v != math.Trunc(v) || v >= math.MaxInt64 || v < math.MinInt64 {
		return 0, fmt.Errorf("%q: %w (not a whole number of bytes that fits 64 bits)", s, ErrSyntax)
	}
	return Size(v), nil
}

// String prints s in the largest binary unit that keeps it whole.
func (s Size) String() string {
	if s <= 0 {
		return strconv.FormatInt(int64(s), 10) + "B"
	}
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if s%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(s>>u.shift), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// Flag is a flag.Value for a size in bytes, stored in the integer it
// points to: fs.Var(bytesize.Var(&o.Memory), "bash-memory", "...").
type Flag[T ~int | ~int64] struct{ P *T }

// Var is the Flag storing in p.
func Var[T ~int | ~int64](p *T) Flag[T] { return Flag[T]{P: p} }

// String prints the flag's value (its default, for -help).
func (f Flag[T]) String() string {
	if f.P == nil || *f.P == 0 {
		return ""
	}
	return Size(*f.P).String()
}

// Set parses a size that fits T.
func (f Flag[T]) Set(v string) error {
	n, err := Parse(v)
	if err != nil {
		return err
	}
	if int64(T(n)) != int64(n) {
		return fmt.Errorf("%q: %w (too large)", v, ErrSyntax)
	}
	*f.P = T(n)
	return nil
}
