// Package remotesource makes NATS micro services tool sources of a
// worker: it discovers the endpoints that announce a toolgate tool in
// their metadata (see pkg/remote), registers those tools, routes their
// calls to the endpoints by request/reply within the call's timeout, and
// unregisters a tool once no service has offered it for a few rounds.
//
// A tool is taken only from an endpoint on toolgate.remote.<its name>,
// the one subject a tool identity of that name may listen on, and only
// with the definition (description, kind, schema) the service listening
// there gives when asked on that subject (remote.HeaderDescribe), in every
// discovery round: the credentials bind the name, and the definition to
// it. An announcement another service makes for the name with a
// definition of its own is refused, logged and reported (OnRefused).
// Which announcement describes a name is
// decided the same way on every worker: a name already in the registry (a
// built-in or MCP tool) keeps its tool; among services offering the same
// name (and so sharing its subject), the smallest service name's
// description and schema are taken, then the smallest id's. Every
// collision is logged.
package remotesource

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/remote"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Defaults for the zero values of Options.
const (
	DefaultInterval = 5 * time.Second
	// gather is how long one discovery round collects replies.
	gather = 750 * time.Millisecond
	// describeWait is how long a tool's own service has to confirm its
	// definition.
	describeWait = 2 * time.Second
	// missedRounds is how many rounds a tool may go unseen before it is
	// unregistered.
	missedRounds = 3
)

// Options configure discovery.
type Options struct {
	// NC is the connection services are discovered and called on.
	NC *nats.Conn
	// Registry receives the tools. Required.
	Registry *tools.Registry
	// Interval between discovery rounds; default DefaultInterval.
	Interval time.Duration
	// Logger receives logs; default slog.Default().
	Logger *slog.Logger
	// OnRound, if set, is called after every discovery round with the
	// remote tools registered (tests wait on it).
	OnRound func(registered []string)
	// OnRefused, if set, is called for an announcement refused, once until
	// its reason changes (the worker publishes it as ToolRefused).
	OnRefused func(events.ToolRefusedData)
}

// offer is one endpoint announcing a tool.
type offer struct {
	service, id, subject string
	tool                 remote.Tool
}

func (o offer) def() string {
	return o.subject + "\x00" + o.tool.Description + "\x00" + o.tool.Kind + "\x00" + string(o.tool.Schema)
}

type held struct {
	def    string
	missed int
}

// Run discovers services and keeps their tools in the registry until
// ctx is done, then unregisters them.
func Run(ctx context.Context, o Options) {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	d := &discovery{o: o, held: map[string]*held{}, collisions: map[string]string{}}
	defer d.dropAll()
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		d.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type discovery struct {
	o          Options
	mu         sync.Mutex
	held       map[string]*held  // registered remote tools
	collisions map[string]string // name → last reported collision, to log once
}

// round asks every service for its info and makes the registry match.
func (d *discovery) round(ctx context.Context) {
	offers, err := d.discover(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.o.Logger.Warn("remote tools: discovery", "err", err)
		}
		return
	}
	chosen := d.choose(d.confirm(ctx, offers))
	for name, of := range chosen {
		h := d.held[name]
		if h != nil && h.def == of.def() {
			h.missed = 0
			continue
		}
		if h != nil {
			d.o.Registry.Unregister(name)
			delete(d.held, name)
		} else if _, taken := d.o.Registry.Get(name); taken {
			d.report(name, name, fmt.Sprintf("a tool named %s is already registered (built-in or MCP); the remote one from service %s is ignored", name, of.service))
			continue
		}
		if err := d.o.Registry.Register(d.tool(of)); err != nil {
			d.report(name, name, fmt.Sprintf("service %s offers %s, which cannot be registered: %v", of.service, name, err))
			continue
		}
		d.held[name] = &held{def: of.def()}
		d.o.Logger.Info("remote tool registered", "tool", name, "service", of.service, "subject", of.subject)
	}
	for name, h := range d.held {
		if _, ok := chosen[name]; ok {
			continue
		}
		h.missed++
		if h.missed >= missedRounds {
			d.o.Registry.Unregister(name)
			delete(d.held, name)
			d.o.Logger.Info("remote tool unregistered: no service offers it any more", "tool", name)
		}
	}
	if d.o.OnRound != nil {
		var names []string
		for n := range d.held {
			names = append(names, n)
		}
		sort.Strings(names)
		d.o.OnRound(names)
	}
}

// discover sends one $SRV.INFO request and gathers the replies.
func (d *discovery) discover(ctx context.Context) ([]offer, error) {
	inbox := d.o.NC.NewRespInbox()
	ch := make(chan *nats.Msg, 1024)
	sub, err := d.o.NC.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	subj, _ := micro.ControlSubject(micro.InfoVerb, "", "")
	if err := d.o.NC.PublishRequest(subj, inbox, nil); err != nil {
		return nil, err
	}
	timer := time.NewTimer(gather)
	defer timer.Stop()
	var out []offer
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return out, nil
		case m := <-ch:
			var info micro.Info
			if err := json.Unmarshal(m.Data, &info); err != nil {
				continue // not a micro service reply: ignore
			}
			for _, ep := range info.Endpoints {
				name := ep.Metadata[remote.MetaTool]
				if name == "" {
					continue
				}
				t := remote.Tool{Name: name, Description: ep.Metadata[remote.MetaDescription],
					Schema: json.RawMessage(ep.Metadata[remote.MetaSchema]), Kind: ep.Metadata[remote.MetaKind], Version: info.Version}
				if err := t.Check(); err != nil {
					d.report(name, name, fmt.Sprintf("service %s: %v", info.Name, err))
					continue
				}
				// A tool is served on toolgate.remote.<its name> and nowhere
				// else: a tool identity may listen only there, so a service
				// cannot take over a name its credentials are not for.
				if ep.Subject != remote.SubjectPrefix+name {
					d.report(name, name, fmt.Sprintf("service %s: tool %s must be served on %s, not %q", info.Name, name, remote.SubjectPrefix+name, ep.Subject))
					continue
				}
				out = append(out, offer{service: info.Name, id: info.ID, subject: ep.Subject, tool: t})
			}
		}
	}
}

// confirm keeps the offers whose definition is the one the service
// listening on the tool's own subject gives: only credentials of that tool
// may listen there. The others are refused.
func (d *discovery) confirm(ctx context.Context, offers []offer) []offer {
	type described struct {
		meta map[string]string
		err  error
	}
	var names []string
	for _, of := range offers {
		if !slices.Contains(names, of.tool.Name) {
			names = append(names, of.tool.Name)
		}
	}
	byName := map[string]*described{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			meta, err := d.describe(ctx, name)
			mu.Lock()
			byName[name] = &described{meta, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	var out []offer
	for _, of := range offers {
		ds := byName[of.tool.Name]
		switch {
		case ds.err != nil:
			d.refuse(of, fmt.Sprintf("no service with the credentials of tool %s confirms its definition on %s: %v", of.tool.Name, of.subject, ds.err))
		case !sameDefinition(of.tool, ds.meta):
			d.refuse(of, fmt.Sprintf("service %s announces a definition of %s other than the one the service holding %s's credentials gives on %s", of.service, of.tool.Name, of.tool.Name, of.subject))
		default:
			out = append(out, of)
		}
	}
	return out
}

// describe asks the service on the tool's own subject for its definition.
func (d *discovery) describe(ctx context.Context, name string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, describeWait)
	defer cancel()
	m := nats.NewMsg(remote.SubjectPrefix + name)
	m.Header.Set(remote.HeaderDescribe, "1")
	r, err := d.o.NC.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, err
	}
	if e := r.Header.Get(micro.ErrorHeader); e != "" {
		return nil, fmt.Errorf("it answered with an error: %s", e)
	}
	var meta map[string]string
	if err := json.Unmarshal(r.Data, &meta); err != nil {
		return nil, fmt.Errorf("its answer is not the endpoint metadata (%s): %w", remote.HeaderDescribe, err)
	}
	return meta, nil
}

// sameDefinition reports whether the announced t is what meta describes.
func sameDefinition(t remote.Tool, meta map[string]string) bool {
	return meta[remote.MetaTool] == t.Name && meta[remote.MetaDescription] == t.Description &&
		meta[remote.MetaKind] == t.Kind && meta[remote.MetaSchema] == string(t.Schema)
}

// refuse logs and reports a refused offer once until its reason changes.
func (d *discovery) refuse(of offer, reason string) {
	if !d.report("refused\x00"+of.tool.Name+"\x00"+of.service+"\x00"+of.id, of.tool.Name, reason) {
		return
	}
	if d.o.OnRefused != nil {
		d.o.OnRefused(events.ToolRefusedData{Name: of.tool.Name, Service: of.service, ServiceID: of.id, Reason: reason})
	}
}

// choose picks one offer per tool name: the smallest service name, then
// the smallest id, so every worker picks the same.
func (d *discovery) choose(offers []offer) map[string]offer {
	sort.Slice(offers, func(i, j int) bool {
		a, b := offers[i], offers[j]
		if a.tool.Name != b.tool.Name {
			return a.tool.Name < b.tool.Name
		}
		if a.service != b.service {
			return a.service < b.service
		}
		return a.id < b.id
	})
	out := map[string]offer{}
	for _, of := range offers {
		first, ok := out[of.tool.Name]
		if !ok {
			out[of.tool.Name] = of
			continue
		}
		if first.service != of.service {
			d.report(of.tool.Name, of.tool.Name, fmt.Sprintf("services %s and %s both offer %s; %s serves it", first.service, of.service, of.tool.Name, first.service))
		}
	}
	return out
}

// report logs a collision or a refused tool once until its message under
// key changes, and reports whether it logged.
func (d *discovery) report(key, name, msg string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.collisions[key] == msg {
		return false
	}
	d.collisions[key] = msg
	d.o.Logger.Warn("remote tool: "+msg, "tool", name)
	return true
}

func (d *discovery) tool(of offer) *tools.Tool {
	kind := policy.Kind(of.tool.Kind)
	switch kind {
	case policy.KindRead, policy.KindWrite, policy.KindExecute, policy.KindSearch, policy.KindNetwork, policy.KindOther:
	default:
		kind = policy.KindExecute
	}
	return &tools.Tool{
		Name: of.tool.Name, Description: of.tool.Description, Parameters: of.tool.Schema, Kind: kind,
		Category: "remote", Version: of.tool.Version, Tags: []string{"remote", "service:" + of.service},
		Handler: tools.HandlerFunc(d.call(of.subject)),
	}
}

// call routes a call to subject and maps the reply.
func (d *discovery) call(subject string) func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
	return func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
		args, err := json.Marshal(c.Args)
		if err != nil {
			return nil, err
		}
		m := nats.NewMsg(subject)
		m.Data = args
		m.Header.Set(remote.HeaderCallID, c.ID)
		m.Header.Set(remote.HeaderAgent, c.Agent)
		if c.SessionID != "" {
			m.Header.Set(remote.HeaderSession, c.SessionID)
		}
		if dl, ok := ctx.Deadline(); ok {
			m.Header.Set(remote.HeaderDeadline, dl.UTC().Format(time.RFC3339Nano))
		}
		reply, err := d.o.NC.RequestMsgWithContext(ctx, m)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err() // the pipeline reports the timeout or cancellation
		case err == nats.ErrNoResponders:
			return &tools.Output{Content: fmt.Sprintf("no service is serving %s right now", c.Tool.Name), IsError: true}, nil
		case err != nil:
			return &tools.Output{Content: fmt.Sprintf("remote tool %s: %v", c.Tool.Name, err), IsError: true}, nil
		}
		if e := reply.Header.Get(micro.ErrorHeader); e != "" {
			return &tools.Output{Content: fmt.Sprintf("remote tool %s failed: %s (code %s)", c.Tool.Name, e, reply.Header.Get(micro.ErrorCodeHeader)), IsError: true}, nil
		}
		var r remote.Result
		if err := json.Unmarshal(reply.Data, &r); err != nil {
			return &tools.Output{Content: fmt.Sprintf("remote tool %s replied with something other than a result: %v", c.Tool.Name, err), IsError: true}, nil
		}
		return &tools.Output{Content: r.Content, IsError: r.IsError, Metadata: r.Metadata}, nil
	}
}

// dropAll unregisters every remote tool (at stop).
func (d *discovery) dropAll() {
	for name := range d.held {
		d.o.Registry.Unregister(name)
	}
}
