// Package approvalcli is the terminal side of approvals, wired into toolctl:
// `approvals list | show ID | approve ID | reject ID --reason ... | answer
// ID --answer ...` through the approver service's JSON API, and
// `amendments list | revoke ID` on the shared policy bucket.
package approvalcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/parking"
	papproval "github.com/toolgate/toolgate/pkg/approval"
)

// Defaults, overridden by flags or the environment.
const (
	// DefaultApprover is the approver service's default address.
	DefaultApprover = "http://127.0.0.1:8470"
	// DefaultNATS is the default NATS URL (the embedded server's).
	DefaultNATS = "nats://127.0.0.1:4222"
)

// approvalsUsage is the approvals commands' usage text.
func approvalsUsage() string {
	return `usage:
  approvals list    [--approver URL] [--token TOKEN] [--json]
  approvals show    ID [--approver URL] [--token TOKEN]
  approvals approve ID [--comment TEXT] [--always-allow | --always-allow-prefix WORDS |
                    --args JSON | --args-file FILE] [--approver URL] [--token TOKEN]
      --always-allow allows the call's whole simple command from now on;
      --always-allow-prefix a wider prefix of it (approvals show lists them)
  approvals reject  ID --reason TEXT [--approver URL] [--token TOKEN]
  approvals answer  ID --answer TEXT [--approver URL] [--token TOKEN]

The approver URL defaults to $TOOLGATE_APPROVER or ` + DefaultApprover + `, the token to
$TOOLGATE_TOKEN, else the first token of ` + localTokens() + `.
`
}

const amendmentsUsage = `usage:
  policy amendments list      [--nats URL] [--json]
      the "always allow" grants people made when approving a call
  policy amendments revoke ID [--nats URL]
      withdraw one; workers stop applying it at once

The NATS URL defaults to $NATS_URL or ` + DefaultNATS + `.
`

// Usage returns the usage text of a command: "approvals" or "amendments".
func Usage(command string) string {
	if command == "amendments" {
		return amendmentsUsage
	}
	return approvalsUsage()
}

// Run runs one command (args start with "approvals" or "amendments"; a
// leading "policy" is skipped) and returns the exit code: 0 done, 1 failed,
// 2 bad usage.
func Run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "policy" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, approvalsUsage())
		return 2
	}
	if args[0] != "approvals" && args[0] != "amendments" {
		fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], approvalsUsage())
		return 2
	}
	cmd := args[0]
	if len(args) < 2 {
		fmt.Fprint(stderr, Usage(cmd))
		return 2
	}
	if isHelp(args[1]) {
		fmt.Fprint(stdout, Usage(cmd))
		return 0
	}
	if cmd == "approvals" {
		return approvals(args[1], args[2:], stdout, stderr)
	}
	return amendments(args[1], args[2:], stdout, stderr)
}

func isHelp(a string) bool { return a == "help" || a == "-h" || a == "--help" || a == "-help" }

// parse parses flags and positional arguments in any order; "--" ends
// the flags.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		n := len(args)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := n - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// exitFlags is the exit code after a flag error: help is not a failure.
func exitFlags(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// localTokens is the token file an approver started with no flags by the
// same OS user creates, in the state directory.
func localTokens() string {
	dir, err := identity.StatePath()
	if err != nil {
		return filepath.Join("$XDG_STATE_HOME", "toolgate", "approver", "tokens")
	}
	return filepath.Join(dir, "approver", "tokens")
}

// firstToken reads the first `<identity> <token>` line of a token file.
func firstToken(path string) (identity, token string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			return f[0], f[1]
		}
	}
	return "", ""
}

func approvals(verb string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("approvals "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("approver", env("TOOLGATE_APPROVER", DefaultApprover), "approver service URL")
	token := fs.String("token", os.Getenv("TOOLGATE_TOKEN"), "approver token (default $TOOLGATE_TOKEN, else the first token of "+localTokens()+")")
	asJSON := fs.Bool("json", false, "print JSON")
	comment := fs.String("comment", "", "comment on an approval")
	reason := fs.String("reason", "", "why the call is rejected (required for reject)")
	answer := fs.String("answer", "", "the answer to a clarify question")
	always := fs.Bool("always-allow", false, "approve and allow calls like this one from now on (the narrowest scope: the whole simple command)")
	alwaysPrefix := fs.String("always-allow-prefix", "", "approve and allow from now on commands starting with these words (a wider scope, chosen explicitly)")
	editArgs := fs.String("args", "", "approve with changes: the call's arguments as a JSON object, instead of the parked ones")
	editFile := fs.String("args-file", "", "approve with changes: read the arguments from this file (- for standard input)")
	pos, err := parse(fs, args)
	if err != nil {
		return exitFlags(err)
	}
	if *token == "" {
		// Zero-config on one machine: the approver started here wrote its
		// token file; use it as that person.
		who, tok := firstToken(localTokens())
		if tok == "" {
			fmt.Fprintln(stderr, "no token: pass --token or set TOOLGATE_TOKEN (or run as the user whose approver keeps "+localTokens()+")")
			return 2
		}
		*token = tok
		fmt.Fprintf(stderr, "acting as %s (token from %s)\n", who, localTokens())
	}
	c := &apiClient{base: strings.TrimSuffix(*base, "/"), token: *token, http: &http.Client{Timeout: 30 * time.Second}}
	needID := func() (string, bool) {
		if len(pos) != 1 {
			fmt.Fprintf(stderr, "approvals %s needs exactly one call id\n%s", verb, approvalsUsage())
			return "", false
		}
		return pos[0], true
	}
	switch verb {
	case "list":
		var list []map[string]any
		raw, err := c.do("GET", "/api/approvals", nil, &list)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if *asJSON {
			stdout.Write(unescapeHTML(raw))
			return 0
		}
		printList(stdout, list)
		return 0
	case "show":
		id, ok := needID()
		if !ok {
			return 2
		}
		raw, err := c.do("GET", "/api/approvals/"+url.PathEscape(id), nil, nil)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		var b bytes.Buffer
		_ = json.Indent(&b, unescapeHTML(raw), "", "  ")
		fmt.Fprintln(stdout, b.String())
		return 0
	case "approve", "reject", "answer":
		id, ok := needID()
		if !ok {
			return 2
		}
		body := map[string]any{}
		switch verb {
		case "approve":
			body["comment"] = *comment
			if *alwaysPrefix != "" {
				body["always_allow"] = map[string]string{"command_prefix": *alwaysPrefix}
			} else if *always {
				body["always_allow"] = true
			}
			edited, err := readEdit(*editArgs, *editFile, os.Stdin)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 2
			}
			if edited != nil {
				body["arguments"] = edited
			}
		case "reject":
			if strings.TrimSpace(*reason) == "" {
				fmt.Fprintln(stderr, "approvals reject needs --reason")
				return 2
			}
			body["reason"], body["comment"] = *reason, *comment
		case "answer":
			if *answer == "" {
				fmt.Fprintln(stderr, "approvals answer needs --answer")
				return 2
			}
			body["answer"], body["comment"] = *answer, *comment
		}
		var res struct {
			Status           string   `json:"status"`
			EditedArgsSHA256 string   `json:"edited_args_sha256"`
			ApprovedBy       []string `json:"approved_by"`
			Amendment        *struct {
				ID string `json:"id"`
			} `json:"amendment"`
		}
		if _, err := c.do("POST", "/api/approvals/"+url.PathEscape(id)+"/"+verb, body, &res); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		switch res.Status {
		case "published":
			fmt.Fprintf(stdout, "%s: decision published; no worker has recorded it yet\n", id)
		case "pending":
			fmt.Fprintf(stdout, "%s: approval recorded (%s); more approvals needed\n", id, strings.Join(res.ApprovedBy, ", "))
		default:
			fmt.Fprintf(stdout, "%s: %s\n", id, res.Status)
		}
		if res.EditedArgsSHA256 != "" {
			fmt.Fprintf(stdout, "approved with changes: the call runs with the edited arguments (sha256 %s)\n", res.EditedArgsSHA256)
		}
		if res.Amendment != nil {
			fmt.Fprintf(stdout, "amendment %s requested (revoke with: toolctl policy amendments revoke %s)\n", res.Amendment.ID, res.Amendment.ID)
		}
		return 0
	}
	fmt.Fprintf(stderr, "unknown approvals command %q\n%s", verb, approvalsUsage())
	return 2
}

func printList(w io.Writer, list []map[string]any) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no pending approvals")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL\tAGENT\tTOOL\tRULE\tREQUESTED\tLEFT\tARGUMENTS")
	for _, v := range list {
		left, requested := "?", "?"
		if s, ok := v["expires_at"].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				left = max(time.Until(t), 0).Round(time.Second).String()
			}
		}
		if s, ok := v["requested_at"].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				requested = t.Local().Format(time.DateTime) // as the page and amendments list show times
			}
		}
		a := plainJSON(v["arguments"])
		if r := []rune(a); len(r) > 60 {
			a = string(r[:57]) + "..."
		}
		fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%s\t%s\t%s\n", v["call_id"], v["agent"], v["tool"], v["rule"], requested, left, a)
	}
	tw.Flush()
}

type apiClient struct {
	base, token string
	http        *http.Client
}

// do calls the API and decodes the answer into out; an error status
// becomes an error carrying the API's message.
func (c *apiClient) do(method, path string, body, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("approver URL %q: %w", c.base, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once, below
		}
		return nil, fmt.Errorf("cannot reach the approver at %s (is it running? start it with `go run ./cmd/approver`, or pass --approver URL): %w", c.base, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return raw, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, e.Error)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("%s %s: unreadable answer: %w", method, path, err)
		}
	}
	return raw, nil
}

func amendments(verb string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("amendments "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", env("NATS_URL", DefaultNATS), "NATS URL")
	creds := fs.String("creds", "", "admin credentials file (env TOOLGATE_CREDS; default minted from the state directory)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return exitFlags(err)
	}
	if verb != "list" && verb != "revoke" {
		fmt.Fprintf(stderr, "unknown amendments command %q\n%s", verb, amendmentsUsage)
		return 2
	}
	if verb == "revoke" && len(pos) != 1 {
		fmt.Fprintf(stderr, "amendments revoke needs exactly one amendment id\n%s", amendmentsUsage)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _, err := identity.Dial(*natsURL, *creds, identity.RoleAdmin, "admin", nats.Name("toolctl"), nats.Timeout(5*time.Second))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	kv, err := js.KeyValue(ctx, bus.BucketPolicy)
	if err != nil {
		fmt.Fprintf(stderr, "policy bucket %s: %v\n", bus.BucketPolicy, err)
		return 1
	}
	if verb == "revoke" {
		if err := parking.RevokeAmendment(ctx, kv, pos[0]); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "amendment %s revoked\n", pos[0])
		return 0
	}
	list, err := parking.ListAmendments(ctx, kv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *asJSON {
		if list == nil {
			list = []papproval.Amendment{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(list)
		return 0
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "no amendments")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGENT\tTOOL\tSCOPE\tBY\tCREATED\tSTATE")
	now := time.Now()
	for _, a := range list {
		scope := "any call"
		switch {
		case a.CommandPrefix != "":
			scope = "command " + a.CommandPrefix + " ..."
		case a.PathPattern != "":
			scope = "path " + a.PathPattern
		}
		state := "active"
		if !a.Active(now) {
			state = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Agent, a.Tool, scope, strings.Join(a.CreatedBy, ","),
			a.CreatedAt.Local().Format(time.DateTime), state)
	}
	tw.Flush()
	return 0
}

// plainJSON is v as compact JSON for people: & < > as themselves, not
// \u0026 and friends (which protect JSON inside HTML, not a terminal).
func plainJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// htmlEscapes are the escapes an HTML-safe JSON encoder writes for & < >.
var htmlEscapes = map[string]string{`\u0026`: "&", `\u003c`: "<", `\u003e`: ">"}

// unescapeHTML turns the \u0026, \u003c and \u003e escapes of a JSON text
// back into & < >, which mean the same in JSON. An escaped backslash
// followed by "u0026" is left alone.
func unescapeHTML(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			out = append(out, raw[i])
			continue
		}
		if i+6 <= len(raw) {
			if r, ok := htmlEscapes[strings.ToLower(string(raw[i:i+6]))]; ok {
				out = append(out, r...)
				i += 5
				continue
			}
		}
		if i+1 < len(raw) { // any other escape, kept whole
			out = append(out, raw[i], raw[i+1])
			i++
			continue
		}
		out = append(out, raw[i])
	}
	return out
}
