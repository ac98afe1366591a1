package builtin

import (
	"fmt"
	"strings"
)

// maxDiffCells bounds the line-matching table of unifiedDiff; a larger
// changed region is shown as one removal and one addition.
const maxDiffCells = 4 << 20

// unifiedDiff returns the unified diff (diff -u style, ctx lines of
// context) turning a into b, both named name.
func unifiedDiff(name, a, b string, ctx int) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	ops := diffLines(al, bl)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", name, name)
	// Walk the ops, cutting hunks around changes.
	type pos struct{ i, a, b int } // op index, line in a, line in b (0-based)
	n := len(ops)
	i, ai, bi := 0, 0, 0
	for i < n {
		// Find the next change.
		for i < n && ops[i].kind == ' ' {
			i, ai, bi = i+1, ai+1, bi+1
		}
		if i == n {
			break
		}
		start := max(i-ctx, 0)
		back := i - start
		hs := pos{start, ai - back, bi - back}
		// Extend while changes are within 2*ctx of each other.
		end, ae, be := i, ai, bi
		for end < n {
			if ops[end].kind != ' ' {
				if ops[end].kind == '-' {
					ae++
				} else {
					be++
				}
				end++
				continue
			}
			run := 0
			for end+run < n && ops[end+run].kind == ' ' {
				run++
			}
			if end+run == n || run > 2*ctx {
				keep := min(run, ctx)
				end, ae, be = end+keep, ae+keep, be+keep
				break
			}
			end, ae, be = end+run, ae+run, be+run
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(hs.a, ae-hs.a), hunkRange(hs.b, be-hs.b))
		for _, op := range ops[hs.i:end] {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i, ai, bi = end, ae, be
	}
	return out.String()
}

func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

type diffOp struct {
	kind byte // ' ', '-', '+'
	line string
}

// splitLines splits s after each newline; the last line may lack one.
func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// diffLines returns an edit script from a to b: common prefix and suffix
// are trimmed, and the middle is matched by longest common subsequence
// when small enough.
func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		ops = append(ops, diffOp{' ', a[p]})
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	am, bm := a[p:len(a)-s], b[p:len(b)-s]
	if len(am)*len(bm) <= maxDiffCells {
		ops = append(ops, lcsOps(am, bm)...)
	} else {
		for _, l := range am {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range bm {
			ops = append(ops, diffOp{'+', l})
		}
	}
	for _, l := range a[len(a)-s:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

func lcsOps(a, b []string) []diffOp {
	n, m := len(a), len(b)
	// t[i][j] = LCS length of a[i:], b[j:].
	t := make([][]int32, n+1)
	for i := range t {
		t[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				t[i][j] = t[i+1][j+1] + 1
			} else {
				t[i][j] = max(t[i+1][j], t[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i, j = i+1, j+1
		case t[i+1][j] >= t[i][j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	return ops
}
