package bash

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/toolgate/toolgate/pkg/tools"
)

// DefaultProxyPort is the loopback port inside the sandbox where a call
// granted the network finds the egress proxy.
const DefaultProxyPort = 3128

// egressDir is where the relay and the proxy's socket appear inside the
// sandbox (in its private /tmp).
const egressDir = "/tmp/.toolgate-egress"

// Proxy connects sandboxed commands granted the network to a filtering
// proxy on the worker's side. bubblewrap cannot forward ports, so the
// proxy listens on a unix socket that is bound into the sandbox, and a
// relay started inside the sandbox's own network namespace carries
// 127.0.0.1:Port to it before it runs the command.
type Proxy struct {
	// Open starts the proxy for one call on a unix socket and returns the
	// socket's path and a function that stops it when the call ends and
	// returns the connections it refused, each with the reason (they go
	// into the result's metadata as egress_refused). Required.
	Open func(ctx context.Context, c *tools.Call) (socket string, stop func() (refused []string), err error)
	// Relay is the command line of the relay: its program (an absolute
	// path, bound read-only into the sandbox) and its first arguments.
	// It is run with LISTEN SOCKET -- COMMAND... appended, must listen on
	// LISTEN, carry every connection to the unix socket SOCKET, run
	// COMMAND, and exit with its status (internal/egress's relay, run
	// from the worker's own executable). Required.
	Relay []string
	// Port is the loopback port inside the sandbox; zero means
	// DefaultProxyPort.
	Port int
}

func (p *Proxy) validate() error {
	if p == nil {
		return nil
	}
	if p.Open == nil {
		return errors.New("bash config: proxy: open: required")
	}
	if len(p.Relay) == 0 || !filepath.IsAbs(p.Relay[0]) {
		return errors.New("bash config: proxy: relay: want the absolute path of the relay program first")
	}
	if p.Port < 0 || p.Port > 65535 {
		return fmt.Errorf("bash config: proxy: port %d out of range", p.Port)
	}
	return nil
}

// attach starts the call's proxy and returns what the sandbox needs: the
// bwrap mounts of the relay and the socket, the command line wrapped in
// the relay, and the proxy variables of the environment.
func (p *Proxy) attach(ctx context.Context, c *tools.Call, inner []string) (stop func() []string, mounts, argv, env []string, err error) {
	socket, stop, err := p.Open(ctx, c)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	port := p.Port
	if port == 0 {
		port = DefaultProxyPort
	}
	relay, sock := egressDir+"/relay", egressDir+"/proxy.sock"
	mounts = []string{"--perms", "0755", "--dir", egressDir,
		"--ro-bind", p.Relay[0], relay,
		"--bind", socket, sock}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	argv = append(append([]string{relay}, p.Relay[1:]...), listen, sock, "--")
	argv = append(argv, inner...)
	url := "http://" + listen
	env = []string{"http_proxy=" + url, "HTTP_PROXY=" + url, "https_proxy=" + url, "HTTPS_PROXY=" + url,
		"all_proxy=" + url, "ALL_PROXY=" + url, "no_proxy=localhost,127.0.0.1,::1", "NO_PROXY=localhost,127.0.0.1,::1"}
	return stop, mounts, argv, env, nil
}
