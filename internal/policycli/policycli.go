// Package policycli is the policy part of toolctl: check a call against a
// policy document and print the decision, lint a document. toolctl wires
// it as "toolctl policy ...".
package policycli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/pkg/policy"
)

// Exit codes.
const (
	exitOK      = 0
	exitInvalid = 1 // the policy document is invalid or unreadable
	exitUsage   = 2 // bad command line
)

const usage = `usage:
  policy check [--policy FILE] [--workspace DIR] [--agent ID] [--kind KIND] [--unknown] --tool NAME --args JSON
      print the decision on one call as a JSON object; exits 0 whatever the action
  policy lint FILE
      validate a policy document and print its problems and warnings (a
      failing example is a problem)
  policy test FILE
      judge every example of a policy document and print how each came out;
      exits 1 when one does not come out as written
  policy default
      print the built-in policy used when none is configured (a start for
      your own: toolctl policy default > policy.yaml)
`

// Usage is the usage text of the policy commands this package runs.
func Usage() string { return usage }

// Run runs "policy <subcommand> args..." (args without the leading
// "policy") and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "check":
		return check(args[1:], stdout, stderr)
	case "lint":
		return lint(args[1:], stdout, stderr)
	case "test":
		return test(args[1:], stdout, stderr)
	case "default":
		_, _ = stdout.Write(policy.DefaultDocument())
		return exitOK
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "policy: unknown subcommand %q\n%s", args[0], usage)
	return exitUsage
}

func isHelp(a string) bool { return a == "help" || a == "-h" || a == "--help" || a == "-help" }

// Output is what check prints: the decision, with durations as text.
type Output struct {
	Action          policy.Action `json:"action"`
	Reason          string        `json:"reason"`
	Rule            string        `json:"rule"`
	Offending       string        `json:"offending"`
	Revision        string        `json:"revision"`
	Timeout         string        `json:"timeout,omitempty"`
	Approvers       int           `json:"approvers,omitempty"`
	ApprovalTimeout string        `json:"approval_timeout,omitempty"`
	MaxBytes        int64         `json:"max_bytes,omitempty"`
	MaxResults      int           `json:"max_results,omitempty"`
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("policy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("policy", "", "policy document (YAML or JSON); the built-in policy when empty")
	workspace := fs.String("workspace", "", "workspace root paths are judged against (default: the current directory)")
	agent := fs.String("agent", "agent", "agent id")
	tool := fs.String("tool", "", "tool name (aliases accepted)")
	kind := fs.String("kind", "", "kind of a tool that is not built in (read, write, execute, search, network, other)")
	unknown := fs.Bool("unknown", false, "judge the tool as not registered")
	rawArgs := fs.String("args", "{}", "tool arguments as a JSON object")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "policy check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *tool == "" {
		fmt.Fprintln(stderr, "policy check: --tool is required")
		return exitUsage
	}
	var callArgs map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(*rawArgs)))
	dec.UseNumber()
	if err := dec.Decode(&callArgs); err != nil || callArgs == nil || dec.More() {
		if err == nil {
			err = errors.New("not a single JSON object")
		}
		fmt.Fprintf(stderr, "policy check: --args must be a JSON object: %v\n", err)
		return exitUsage
	}
	ws := *workspace
	if ws == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(stderr, "policy check: %v\n", err)
			return exitUsage
		}
		ws = wd
	}
	ws, err := filepath.Abs(ws)
	if err != nil {
		fmt.Fprintf(stderr, "policy check: workspace: %v\n", err)
		return exitUsage
	}
	p := policy.Default()
	if *file != "" {
		var warns []policy.Warning
		p, warns, err = policy.Load(*file)
		if err != nil {
			printError(stderr, err)
			return exitInvalid
		}
		for _, w := range warns {
			fmt.Fprintf(stderr, "%s:%s\n", *file, warning(w))
		}
	}
	req := policy.Request{Agent: *agent, Tool: *tool, Known: !*unknown, Kind: policy.Kind(*kind), Arguments: callArgs, Workspace: ws}
	if k, ok := policy.BuiltinKind(*tool); ok && req.Kind == "" {
		req.Kind = k
	}
	if req.Kind == "" && req.Known {
		req.Kind = policy.KindOther
	}
	if *unknown {
		req.Kind = ""
	}
	d := policy.NewGate(p).Evaluate(context.Background(), req)
	out := Output{Action: d.Action, Reason: d.Reason, Rule: d.Rule, Offending: d.Offending, Revision: d.Revision,
		Approvers: d.Approvers, MaxBytes: d.MaxBytes, MaxResults: d.MaxResults}
	if d.Timeout > 0 {
		out.Timeout = d.Timeout.String()
	}
	if d.ApprovalTimeout > 0 {
		out.ApprovalTimeout = d.ApprovalTimeout.String()
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(stderr, "policy check: %v\n", err)
		return exitInvalid
	}
	return exitOK
}

// fileArg reads the one FILE argument of "policy NAME FILE"; done
// reports that the command is over (help or a bad command line) with
// the exit code.
func fileArg(name string, args []string, stdout, stderr io.Writer) (file string, code int, done bool) {
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprintf(stdout, "usage: policy %s FILE\n", name)
		return "", exitOK, true
	}
	if len(args) != 1 {
		fmt.Fprintf(stderr, "usage: policy %s FILE\n", name)
		return "", exitUsage, true
	}
	return args[0], exitOK, false
}

func lint(args []string, stdout, stderr io.Writer) int {
	file, code, done := fileArg("lint", args, stdout, stderr)
	if done {
		return code
	}
	p, warns, err := policy.Load(file)
	if err != nil {
		printError(stderr, err)
		return exitInvalid
	}
	for _, w := range warns {
		fmt.Fprintf(stdout, "%s:%s\n", file, warning(w))
	}
	fmt.Fprintf(stdout, "%s: valid, revision %s, %d warning(s)\n", file, p.Revision(), len(warns))
	return exitOK
}

// test judges every example of FILE and prints one line per example:
// ok or FAIL, with the decision a failing one got and its reason.
func test(args []string, stdout, stderr io.Writer) int {
	file, code, done := fileArg("test", args, stdout, stderr)
	if done {
		return code
	}
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "policy: %v\n", err)
		return exitInvalid
	}
	_, results, _, err := policy.ParseExamples(data, file)
	if err != nil {
		printError(stderr, err)
		return exitInvalid
	}
	failed := 0
	for _, r := range results {
		status := "ok  "
		if !r.Pass() {
			status = "FAIL"
			failed++
		}
		fmt.Fprintf(stdout, "%s %s:line %d: %s\n", status, file, r.Example.Line, r)
	}
	if len(results) == 0 {
		fmt.Fprintf(stdout, "%s: no examples\n", file)
		return exitOK
	}
	fmt.Fprintf(stdout, "%s: %d example(s), %d failed\n", file, len(results), failed)
	if failed > 0 {
		return exitInvalid
	}
	return exitOK
}

// warning formats a warning as "line N: warning: field: message".
func warning(w policy.Warning) string {
	s := fmt.Sprintf("line %d: warning: ", w.Line)
	if w.Field != "" {
		s += w.Field + ": "
	}
	return s + w.Message
}

// printError prints every problem of an invalid document on its own line.
func printError(w io.Writer, err error) {
	err = policy.Suggest(err)
	var pe *policy.ParseError
	if errors.As(err, &pe) {
		for _, p := range pe.Problems {
			fmt.Fprintf(w, "%s:%s\n", pe.Source, p)
		}
		fmt.Fprintf(w, "%s: invalid policy, %d problem(s); nothing was loaded\n", pe.Source, len(pe.Problems))
		return
	}
	fmt.Fprintf(w, "policy: %v\n", err)
}
