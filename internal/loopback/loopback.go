// Package loopback tells whether an HTTP Host or Origin names this
// machine's loopback interface: what the HTTP faces bound to loopback
// (the MCP endpoint, the hook endpoint) check so that a web page reaching
// them through DNS rebinding is refused.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether hostport (a Host header or an Origin's host, with
// or without a port) is localhost or a loopback address.
func Host(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
