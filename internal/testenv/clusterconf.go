package testenv

import (
	"bufio"
	"fmt"
	"strings"
)

// ClusterNodeConf is deploy/nats/cluster-node.conf (shipped) for one node
// of a cluster on this machine: its name, loopback client and route
// ports, store dir and routes (routes maps node-a, node-b ... to their
// route ports); everything else as shipped, including the include of
// auth.conf and no monitoring port.
func ClusterNodeConf(shipped, name string, port, cport int, store string, routes map[string]int) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(shipped))
	for sc.Scan() {
		l := sc.Text()
		trim := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trim, "server_name:"):
			l = "server_name: " + name
		case strings.HasPrefix(trim, "listen: 0.0.0.0:4222"):
			l = fmt.Sprintf("listen: 127.0.0.1:%d", port)
		case strings.HasPrefix(trim, "http:"):
			l = "" // no monitoring port
		case strings.HasPrefix(trim, "store_dir:"):
			l = fmt.Sprintf("  store_dir: %q", store)
		case strings.HasPrefix(trim, "listen: 0.0.0.0:6222"):
			l = fmt.Sprintf("  listen: 127.0.0.1:%d", cport)
		case strings.HasPrefix(trim, "nats-route://node-"):
			n := strings.TrimSuffix(strings.TrimPrefix(trim, "nats-route://"), ":6222")
			l = fmt.Sprintf("    nats-route://127.0.0.1:%d", routes[n])
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + "\n"
}
