package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

// The kernel-only escape oracle: every command of the escape corpus runs
// as if the gate had allowed it with the judgement of a benign command
// (the gate mispredicted it), so that what holds it is the sandbox
// alone: the view the judgement grants, its writes, its masks, the
// read-only protected files and the exec restriction. What is asserted
// is seen from outside, by effects: no secret printed, no marker or
// other file written beyond what the judgement grants, no protected file
// changed, the marker program never run.

// escapeJudgements are the benign commands whose judgement each command
// of the corpus runs with, and the workspace files that judgement lets a
// call write.
var escapeJudgements = []struct {
	name, judged string
	writes       []string
}{
	{name: "read-only", judged: "cat notes.txt"},
	{name: "writes-out.txt", judged: "cat notes.txt > out.txt", writes: []string{"out.txt"}},
}

// mispredictedGate is gate with the judgement of judged given to every
// call, and the call's own command run in its place. A judgement the
// policy asks about is not run: a person's approval grants the call the
// whole workspace, which is no boundary to test.
func mispredictedGate(gate policy.Evaluator, judged string) policy.Evaluator {
	return policy.EvaluatorFunc(func(ctx context.Context, req policy.Request) policy.Decision {
		ran, _ := req.Arguments["command"].(string)
		req.Arguments = maps.Clone(req.Arguments)
		req.Arguments["command"] = judged
		d := gate.Evaluate(ctx, req)
		d.Command = ran
		return d
	})
}

// writtenBeyond lists the paths that differ between the snapshots
// before and after, but those in allowed and the repository's index,
// which the outside git status of escapes rewrites.
func writtenBeyond(before, after map[string]string, allowed []string) []string {
	var got []string
	for p, v := range after {
		if filepath.Base(p) == "index" && filepath.Base(filepath.Dir(p)) == ".git" {
			continue
		}
		if before[p] != v && !slices.Contains(allowed, p) {
			got = append(got, "wrote "+p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok && !slices.Contains(allowed, p) {
			got = append(got, "removed "+p)
		}
	}
	slices.Sort(got)
	return got
}

func TestEscapeOracleKernel(t *testing.T) { escapeOracleKernel(t, false) }

// escapeOracleKernel runs the kernel-only escape oracle; prepared: the
// bash tool's sandboxes are prepared ahead (Config.Prepared: sandbox
// templates where the machine has them), so that all but the first
// calls of each judgement run in one.
func escapeOracleKernel(t *testing.T, prepared bool) {
	corpus := escapeCorpus()
	for _, pol := range escapePolicies(t) {
		var p *policy.Policy
		if pol.doc != "" {
			var err error
			if p, _, err = policy.Parse([]byte(pol.doc), pol.name); err != nil {
				t.Fatal(err)
			}
		}
		gate := policy.NewGate(p)
		for _, j := range escapeJudgements {
			t.Run(pol.name+"/"+j.name, func(t *testing.T) {
				s := escapeWorkspace(t, pol)
				tool, err := bash.New(bash.Config{Workspace: s.ws, Sandbox: bash.ModeRequire, Prepared: prepared})
				if err != nil {
					t.Fatal(err)
				}
				reg := tools.NewRegistry()
				if err := reg.Register(tool); err != nil {
					t.Fatal(err)
				}
				pipe := tools.NewPipeline(reg, tools.WithWorkspace(s.ws), tools.WithGate(mispredictedGate(gate, j.judged)))
				handle := func(command string) (*tools.Output, error) {
					raw, err := json.Marshal(map[string]any{"command": command})
					if err != nil {
						t.Fatal(err)
					}
					return pipe.Handle(context.Background(), &tools.Call{ID: "escape-kernel", Agent: "agent-escape", Name: "bash", Arguments: raw})
				}
				call := func(command string) *tools.Output {
					out, err := handle(command)
					if err != nil {
						t.Fatalf("%q: %v", command, err)
					}
					return out
				}
				var allowed []string
				for _, w := range j.writes {
					allowed = append(allowed, filepath.Join(s.ws, w))
				}
				// Controls: the judged command itself runs, and the corpus
				// has effects in this setting when nothing holds it.
				// Seed 000 asks before any write: under it no call the gate
				// allowed writes a file.
				out, err := handle(j.judged)
				switch {
				case errors.Is(err, tools.ErrApprovalRequired):
					t.Skipf("%s asks about %q: %v", pol.name, j.judged, err)
				case err != nil || out.IsError:
					t.Fatalf("the judged %q did not run: %v %+v", j.judged, err, out)
				}
				t.Logf("judged %q: exec %v, write %v", j.judged, out.Metadata["exec"], out.Metadata["write"])
				roots := []string{s.parent, s.outside}
				pristine := snapshot(t, roots...)
				unheld := 0
				for _, template := range corpus {
					if len(s.direct(t, s.expand(template))) > 0 {
						unheld++
					}
				}
				if unheld == 0 {
					t.Fatal("no command of the corpus has an effect when run outside the sandbox: the oracle would see none")
				}
				for _, r := range roots {
					restore(t, r, pristine)
				}
				s.escapes(t, "")
				before := snapshot(t, roots...)
				effects := 0
				var held []string
				for _, template := range corpus {
					command := s.expand(template)
					out := call(command)
					if md, _ := out.Metadata["exec"].(string); strings.Contains(md, "unrestricted") {
						t.Errorf("%q ran unrestricted: %s", command, md)
					}
					text := outputText(out)
					got := writtenBeyond(before, snapshot(t, roots...), allowed)
					got = append(got, s.escapes(t, text)...)
					if len(got) == 0 {
						continue
					}
					effects += len(got)
					held = append(held, fmt.Sprintf("%q: %s\n\toutput: %q", command, strings.Join(got, "; "), text))
					// Put the tree back for the next command.
					for _, r := range roots {
						restore(t, r, before)
					}
					before = snapshot(t, roots...)
				}
				t.Logf("%s judged as %q: %d commands (%d with effects outside the sandbox), %d effects in it", pol.name, j.judged, len(corpus), unheld, effects)
				if len(held) > 0 {
					t.Errorf("%d of %d commands got past the boundary under %s judged as %q:\n%s", len(held), len(corpus), pol.name, j.judged, strings.Join(held, "\n"))
				}
			})
		}
	}
}

// outputText is what a bash call printed.
func outputText(out *tools.Output) string {
	var b bytes.Buffer
	for _, k := range []string{"stdout", "stderr"} {
		if v, ok := out.Metadata[k].(string); ok {
			b.WriteString(v)
		}
	}
	return b.String() + out.Content
}

// restore removes what appeared under root since before was taken.
func restore(t *testing.T, root string, before map[string]string) {
	t.Helper()
	var extra []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if _, ok := before[p]; !ok && err == nil {
			extra = append(extra, p)
		}
		return nil
	})
	for _, p := range extra {
		os.RemoveAll(p)
	}
}
