package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// What the cluster does per call, counted by the nodes themselves from
// their monitoring endpoints, read before and after a round (reading
// them costs the nodes nothing during the round):
//
//   - stored: the messages each stream stored (the change of its last
//     sequence, which deletions and a work queue's acks do not move):
//     calls, results, audit events and checkpoints, and each bucket's
//     writes (KV_<bucket>: a create, update, delete or purge is one);
//     every one of them replicated to each of the stream's replicas;
//   - the workers consumer's deliveries and redeliveries;
//   - the JetStream API requests the nodes served and how many failed
//     (/jsz, summed over the nodes);
//   - the messages the workers and the agents sent and received (/connz,
//     by connection name), the messages the nodes took in and sent out
//     (/varz, summed), and the messages between the nodes (/routez: the
//     replication and the forwarding between nodes), each counted once
//     by its sender.

// nodeCounts is one reading of the cluster's counters.
type nodeCounts struct {
	stored                     map[string]uint64 // stream: last sequence, the highest over the nodes
	delivered, redelivered     uint64            // the workers consumer
	api, apiErrors             uint64            // summed over the nodes
	in, out, routed            int64             // /varz in and out, /routez out, summed over the nodes
	workerIn, workerOut        int64             // messages the workers sent, and got
	agentIn, agentOut          int64             // messages the agents sent, and got
	workerConnIn, workerConnOf map[string]int64  // per worker connection (node/cid): in, out, to subtract the start
	routedBy                   map[string]int64  // messages received from other nodes, by account name
}

// workerConnName is the connection name a worker connects with
// (internal/daemon).
const workerConnName = "toolgate-worker"

var monitor = &http.Client{Timeout: 10 * time.Second}

func getJSON(url string, v any) error {
	resp, err := monitor.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// readCounts reads the counters of the nodes' monitoring endpoints
// (base URLs mons).
func readCounts(mons []string) (nodeCounts, error) {
	c := nodeCounts{stored: map[string]uint64{}, workerConnIn: map[string]int64{}, workerConnOf: map[string]int64{}, routedBy: map[string]int64{}}
	for _, m := range mons {
		var js server.JSInfo
		if err := getJSON(m+"/jsz?accounts=true&streams=true&consumers=true", &js); err != nil {
			return c, err
		}
		c.api += js.API.Total
		c.apiErrors += js.API.Errors
		for _, a := range js.AccountDetails {
			for _, s := range a.Streams {
				c.stored[s.Name] = max(c.stored[s.Name], s.State.LastSeq)
				for _, ci := range s.Consumer {
					if ci != nil && ci.Name == "workers" && s.Name == "TOOLGATE_CALLS" {
						c.delivered = max(c.delivered, ci.Delivered.Consumer)
						c.redelivered = max(c.redelivered, uint64(ci.NumRedelivered))
					}
				}
			}
		}
		var v server.Varz
		if err := getJSON(m+"/varz", &v); err != nil {
			return c, err
		}
		c.in += v.InMsgs
		c.out += v.OutMsgs
		var r server.Routez
		if err := getJSON(m+"/routez", &r); err != nil {
			return c, err
		}
		for _, ri := range r.Routes {
			c.routed += ri.OutMsgs
		}
		var as server.AccountStatz
		if err := getJSON(m+"/accstatz?unused=true", &as); err != nil {
			return c, err
		}
		for _, a := range as.Accounts {
			if a.Received.Routes != nil {
				c.routedBy[cmp.Or(a.Name, a.Account)] += a.Received.Routes.Msgs
			}
		}
		var cz server.Connz
		if err := getJSON(m+"/connz?limit=100000", &cz); err != nil {
			return c, err
		}
		for _, ci := range cz.Conns {
			switch {
			case ci.Name == workerConnName:
				k := fmt.Sprintf("%s/%d", m, ci.Cid)
				c.workerConnIn[k], c.workerConnOf[k] = ci.InMsgs, ci.OutMsgs
			case strings.HasPrefix(ci.Name, "agent-"):
				c.agentIn += ci.InMsgs
				c.agentOut += ci.OutMsgs
			}
		}
	}
	return c, nil
}

// since is what happened between an earlier reading b and c. Worker
// connections are matched by node and id (a worker that reconnected
// counts from zero).
func (c nodeCounts) since(b nodeCounts) nodeCounts {
	d := nodeCounts{stored: map[string]uint64{}, routedBy: map[string]int64{}}
	for a, v := range c.routedBy {
		if v > b.routedBy[a] {
			d.routedBy[a] = v - b.routedBy[a]
		}
	}
	for s, v := range c.stored {
		if v > b.stored[s] {
			d.stored[s] = v - b.stored[s]
		}
	}
	d.delivered, d.redelivered = c.delivered-b.delivered, c.redelivered-b.redelivered
	d.api, d.apiErrors = c.api-b.api, c.apiErrors-b.apiErrors
	d.in, d.out, d.routed = c.in-b.in, c.out-b.out, c.routed-b.routed
	for k, v := range c.workerConnIn {
		d.workerIn += v - b.workerConnIn[k]
		d.workerOut += c.workerConnOf[k] - b.workerConnOf[k]
	}
	d.agentIn, d.agentOut = c.agentIn-b.agentIn, c.agentOut-b.agentOut
	return d
}

// storedOrder lists the streams most calls write first.
var storedOrder = []string{"TOOLGATE_CALLS", "TOOLGATE_RESULTS", "TOOLGATE_AUDIT", "KV_toolgate_calls", "KV_toolgate_budgets"}

// storedNames are the streams d stored into, storedOrder first.
func (d nodeCounts) storedNames() []string {
	var out []string
	for _, s := range storedOrder {
		if d.stored[s] > 0 {
			out = append(out, s)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(d.stored)) {
		if !slices.Contains(storedOrder, s) {
			out = append(out, s)
		}
	}
	return out
}

// storedTotal is every stream's stored messages together.
func (d nodeCounts) storedTotal() uint64 {
	var t uint64
	for _, v := range d.stored {
		t += v
	}
	return t
}

func ratio[T int64 | uint64](v T, n int) string { return fmt.Sprintf("%.2f", float64(v)/float64(n)) }

// print reports d, the counts of n calls, as totals and per call.
func (d nodeCounts) print(tag string, n int) {
	var st []string
	for _, s := range d.storedNames() {
		st = append(st, fmt.Sprintf("%s %d (%s)", s, d.stored[s], ratio(d.stored[s], n)))
	}
	fmt.Printf("%s: stored per stream (per call): %s; all %d (%s)\n", tag, strings.Join(st, ", "), d.storedTotal(), ratio(d.storedTotal(), n))
	fmt.Printf("%s: counts per call: calls delivered %s, redelivered %s; JetStream API requests %s (errors %s); messages: workers sent %s got %s, agents sent %s got %s, nodes in %s out %s, between nodes %s\n", tag,
		ratio(d.delivered, n), ratio(d.redelivered, n), ratio(d.api, n), ratio(d.apiErrors, n),
		ratio(d.workerIn, n), ratio(d.workerOut, n), ratio(d.agentIn, n), ratio(d.agentOut, n),
		ratio(d.in, n), ratio(d.out, n), ratio(d.routed, n))
	var by []string
	for _, a := range slices.Sorted(maps.Keys(d.routedBy)) {
		by = append(by, fmt.Sprintf("%s %s", a, ratio(d.routedBy[a], n)))
	}
	fmt.Printf("%s: messages between nodes per call, by account: %s\n", tag, strings.Join(by, ", "))
}
