package worker

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/version"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// announce publishes a registered event for every tool, and registry
// changes from now on.
func (w *Worker) announce(ctx context.Context) {
	// Watch first: a tool registered meanwhile (an MCP server connecting)
	// may be announced twice, never missed.
	w.pipe.Registry().Watch(func(ch tools.Change) {
		typ := events.TypeToolRegistered
		if ch.Kind == tools.Unregistered {
			typ = events.TypeToolUnregistered
		}
		w.toolEvent(typ, ch.Tool)
	})
	for _, t := range w.pipe.Registry().List() {
		w.toolEvent(events.TypeToolRegistered, t)
	}
}

func (w *Worker) toolEvent(typ string, t *tools.Tool) {
	w.publishEvent(events.ToolEventSubject(t.Name), nuid.Next(), typ, ToolData(t, w.cfg.Name))
}

// ToolRefused publishes that a remote tool's announcement was refused
// (ToolRefused on toolgate.event.tool_refused.<tool>).
func (w *Worker) ToolRefused(d events.ToolRefusedData) {
	d.Worker = w.cfg.Name
	w.publishEvent(events.ToolRefusedSubject(d.Name), nuid.Next(), events.TypeToolRefused, d)
}

// ToolData describes t for registry events and listings.
func ToolData(t *tools.Tool, worker string) events.ToolData {
	return events.ToolData{Name: t.Name, Aliases: t.Aliases, Description: t.Description, Kind: string(t.Kind),
		Version: t.Version, Parameters: t.Parameters, Worker: worker, WorkerVersion: version.Get().Short()}
}

func (w *Worker) listTools(m *nats.Msg) {
	var req events.ToolsListRequest
	if len(m.Data) > 0 {
		_ = json.Unmarshal(m.Data, &req) // a bad body lists everything: calls are judged anyway
	}
	// What an agent's policy denies is its own business: a listing for
	// agent X is asked on X's own subject (which only X, an admin or a
	// worker may publish), or goes to X's inbox or an admin's.
	own, scoped := strings.CutPrefix(m.Subject, events.SubjectToolsList+".")
	if scoped && req.Agent == "" {
		req.Agent = own
	}
	if scoped && req.Agent != own || !scoped && req.Agent != "" && !mayListFor(m.Reply, req.Agent) {
		r := &nats.Msg{Header: nats.Header{}}
		r.Header.Set(micro.ErrorCodeHeader, "403")
		r.Header.Set(micro.ErrorHeader, "the tools of agent "+req.Agent+" are listed only to that agent (on "+
			events.ToolsListSubject(req.Agent)+") or an admin")
		if err := bus.Respond(m, r); err != nil {
			w.log.Warn("tool listing refusal not answered", "err", err)
		}
		return
	}
	var out []events.ToolData
	for _, t := range w.pipe.Registry().List() {
		if req.Agent != "" && w.pipe.DeniedOutright(req.Agent, t) {
			continue
		}
		out = append(out, ToolData(t, w.cfg.Name))
	}
	b, _ := json.Marshal(out)
	if err := bus.Respond(m, &nats.Msg{Data: b}); err != nil {
		w.log.Warn("tool listing not answered", "err", err)
	}
}

// mayListFor reports whether the answer to a listing for agent may go to
// reply: an inbox of that agent or of an admin (or a worker). Every
// identity's credentials confine it to its own inbox prefix
// (identity.InboxPrefix), so the reply subject says who reads the answer.
func mayListFor(reply, agent string) bool {
	for _, p := range []string{identity.InboxPrefix(identity.RoleAgent, agent) + ".",
		identity.InboxPrefix(identity.RoleAdmin, ""), identity.InboxPrefix(identity.RoleWorker, "")} {
		if strings.HasPrefix(reply, p) {
			return true
		}
	}
	return false
}
