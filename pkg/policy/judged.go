package policy

import (
	"context"
	"net"
	"path/filepath"
	"strconv"

	"github.com/toolgate/toolgate/pkg/tooldef"
)

// Judged is the gate's view of a call: what it judged, and nothing else
// of the arguments (no file contents, no payloads). It is kept in the
// audit trail so that the call can be judged again under another policy
// (Gate.Rejudge). The zero value judged nothing of the arguments (a tool
// whose arguments the gate does not read).
type Judged struct {
	// Workspace is the workspace root the call's relative paths were
	// resolved against, as the worker gave it.
	Workspace string
	// Kind is the kind of a tool that is not built in; Unknown marks a
	// tool no worker registered.
	Kind    Kind
	Unknown bool
	// Command is a shell tool's command as judged: the rendering of its
	// syntax tree (what ran), else the command as written when it did
	// not parse. Workdir is its working directory argument.
	Command string
	Workdir string
	// Path and Pattern are a file tool's path argument and path pattern
	// argument (glob), as written.
	Path    string
	Pattern string
	// Hosts are a network tool's host:port, as judged from its URL.
	Hosts []string
	// Links are the paths the gate resolved to another real path
	// (through symbolic links): absolute path as judged → real path.
	Links map[string]string
}

// judged returns the view of the evaluation's call, or nil when the
// gate judged something of it a view cannot hold (a URL it could not
// read): such a call is never judged again on a guess.
func (e *evaluation) judged() *Judged {
	j := &Judged{Workspace: e.req.Workspace, Unknown: !e.known, Links: e.links}
	if _, builtin := BuiltinKind(e.tool); !builtin && e.known {
		j.Kind = e.kind
	}
	str := func(name string) string { s, _ := e.req.Arguments[name].(string); return s }
	switch {
	case !e.known:
	case isShellTool(e.tool):
		j.Command, j.Workdir = str(commandArg), str(workdirArg)
		if e.hasRendered {
			j.Command = e.rendered
		}
	case isFileTool(e.tool):
		j.Path = str(pathArg(e.tool).Name)
		if d, _ := tooldef.Lookup(e.tool); d.Arg(tooldef.PathPattern) != nil {
			j.Pattern = str(d.Arg(tooldef.PathPattern).Name)
		}
	case e.kind == KindNetwork:
		name := urlArg(e.tool)
		if name == "" {
			break
		}
		raw, present := e.req.Arguments[name]
		if !present {
			break
		}
		s, _ := raw.(string)
		host, port, err := URLHostPort(s)
		if err != nil {
			return nil
		}
		j.Hosts = []string{net.JoinHostPort(host, strconv.Itoa(port))}
	}
	return j
}

// urlArg is the URL argument of a network tool: a built-in's, else url.
func urlArg(tool string) string {
	if d, ok := tooldef.Lookup(tool); ok {
		if a := d.Arg(tooldef.URL); a != nil {
			return a.Name
		}
		return ""
	}
	return "url"
}

// Request returns the request the view stands for: agent calling tool
// with the arguments the gate judged.
func (j *Judged) Request(agent, tool string) Request {
	canon := CanonicalTool(tool)
	req := Request{Agent: agent, Tool: canon, Known: !j.Unknown, Kind: j.Kind, Workspace: j.Workspace, Arguments: map[string]any{}}
	if k, ok := BuiltinKind(canon); ok && req.Known {
		req.Kind = k
	}
	set := func(name, v string) {
		if name != "" && v != "" {
			req.Arguments[name] = v
		}
	}
	switch {
	case j.Unknown:
	case isShellTool(canon):
		set(commandArg, j.Command)
		set(workdirArg, j.Workdir)
	case isFileTool(canon):
		set(pathArg(canon).Name, j.Path)
		if d, _ := tooldef.Lookup(canon); d.Arg(tooldef.PathPattern) != nil {
			set(d.Arg(tooldef.PathPattern).Name, j.Pattern)
		}
	case req.Kind == KindNetwork && len(j.Hosts) > 0:
		set(urlArg(canon), "http://"+j.Hosts[0]+"/")
	}
	return req
}

// Rejudge judges again, under the policy in force, the call of tool by
// agent the view j stands for, resolving the paths it recorded through
// symbolic links to the real paths recorded (others as they are now).
// Amendments are not applied: the decision is the policy's own.
func (g *Gate) Rejudge(ctx context.Context, agent, tool string, j *Judged) Decision {
	return g.judge(ctx, j.Request(agent, tool), j.Links, true)
}

// recordLink remembers that abs resolved to real, when they differ.
func (e *evaluation) recordLink(abs, real string) {
	if real == filepath.Clean(abs) {
		return
	}
	if e.links == nil {
		e.links = map[string]string{}
	}
	e.links[abs] = real
}
