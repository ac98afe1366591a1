// Package relay is the small program inside a sandbox whose only network
// is its loopback interface: it serves a loopback port, carries every
// connection to a unix socket bound into the sandbox (the egress proxy),
// and runs the command. The worker runs its own executable as the relay
// (MaybeForward at the top of main), since bubblewrap cannot forward
// ports.
package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// ForwardArg, as a program's first argument, makes RunForwarder take over
// the process (MaybeForward).
const ForwardArg = "__toolgate-egress-relay"

// MaybeForward runs the relay and exits when the process was started as
// one (os.Args[1] == ForwardArg); otherwise it returns at once. Mains of
// programs that run bash with an egress proxy, and test mains
// (testenv.Main), call it first.
func MaybeForward() {
	if len(os.Args) > 1 && os.Args[1] == ForwardArg {
		os.Exit(RunForwarder(os.Args[2:]))
	}
}

// ForwarderArgs are the arguments, after the program and ForwardArg, that
// make the relay listen on listen, carry each connection to the unix
// socket socket, and run command.
func ForwarderArgs(listen, socket string, command []string) []string {
	return append([]string{listen, socket, "--"}, command...)
}

// RunForwarder is the relay run inside a sandbox whose only network is
// its loopback interface: it listens on args[0] (127.0.0.1:PORT), carries
// every connection to the unix socket args[1] (the filtering proxy,
// bound into the sandbox), and runs the command after "--" with the same
// standard streams and environment, forwarding termination signals to it.
// It returns the command's exit status (128 plus the signal that killed
// it), or 126 when the relay cannot start.
func RunForwarder(args []string) int {
	if len(args) < 4 || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "toolgate egress relay: usage: LISTEN SOCKET -- COMMAND...")
		return 126
	}
	listen, socket, command := args[0], args[1], args[3:]
	l, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolgate egress relay: %v\n", err)
		return 126
	}
	go relay(l, socket)
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "toolgate egress relay: %v\n", err)
		return 126
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "toolgate egress relay: %v\n", err)
		return 126
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// relay carries every connection accepted on l to the unix socket.
func relay(l net.Listener, socket string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("unix", socket)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(u, c); closeWrite(u); done <- struct{}{} }()
			go func() { io.Copy(c, u); closeWrite(c); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
