package worker

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolgate/toolgate/internal/bus"
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
