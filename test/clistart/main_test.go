package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestMeasuresEveryCommand builds the programs from this tree, runs the
// measurement small, and checks the table has a row of figures for every
// command.
func TestMeasuresEveryCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds toolctl and the worker")
	}
	var out bytes.Buffer
	if err := measure([]string{"-n", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"/bin/true", "toolctl --help", "toolctl creds agent X", "worker --help"} {
		row := ""
		for l := range strings.Lines(out.String()) {
			if strings.HasPrefix(l, "| `"+c+"` | this |") {
				row = l
			}
		}
		if row == "" || strings.Count(row, " ms ") != 2 || !strings.Contains(row, " MB |") {
			t.Errorf("no row of figures for %s:\n%s", c, out.String())
		}
	}
}
