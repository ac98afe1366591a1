package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
)

// proc is a child process of the bench: a nats-server node or a worker.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// startProc runs cmd, its output going to logFile, and waits until a line
// of its output contains ready.
func startProc(name string, cmd *exec.Cmd, logFile, ready string) (*proc, error) {
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := groups.add(name, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s: cpuacct group: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: lf}
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var once sync.Once
		for sc.Scan() {
			if strings.Contains(sc.Text(), ready) {
				once.Do(func() { close(up) })
			}
			fmt.Fprintln(lf, sc.Text())
		}
		_, _ = io.Copy(lf, out)
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case <-up:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it was ready (log: %s)", name, logFile)
	case <-time.After(3 * time.Minute):
		p.kill()
		return nil, fmt.Errorf("%s not ready after 3 minutes (log: %s)", name, logFile)
	}
}

// stop asks the process to end (SIGINT) and kills it if it has not
// within grace.
func (p *proc) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
	p.log.Close()
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCluster starts the three nodes of deploy/nats/cluster-node.conf
// under dir, each with auth and its monitoring port on the loopback
// interface, and returns them, their client URLs and their monitoring
// URLs.
func startCluster(bin, dir, shipped, auth string) (nodes []*proc, urls, mons []string, err error) {
	names := []string{"node-a", "node-b", "node-c"}
	ports, cports, hports := map[string]int{}, map[string]int{}, map[string]int{}
	for _, n := range names {
		for _, p := range []map[string]int{ports, cports, hports} {
			if p[n], err = freePort(); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	nodes = make([]*proc, len(names))
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, n := range names {
		nd := filepath.Join(dir, n)
		if err := os.MkdirAll(nd, 0o700); err != nil {
			return nil, nil, nil, err
		}
		if err := os.WriteFile(filepath.Join(nd, "auth.conf"), []byte(auth), 0o644); err != nil {
			return nil, nil, nil, err
		}
		conf := filepath.Join(nd, "node.conf")
		text := testenv.ClusterNodeConf(shipped, n, ports[n], cports[n], filepath.Join(nd, "js"), cports) +
			fmt.Sprintf("http: 127.0.0.1:%d\n", hports[n])
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, nil, nil, err
		}
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(ports[n]))
		mons = append(mons, "http://127.0.0.1:"+strconv.Itoa(hports[n]))
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := startProc(n, exec.Command(bin, "-c", conf), filepath.Join(dir, n+".log"), "Server is ready")
			if err != nil {
				errs <- err
				return
			}
			nodes[i] = p
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		for _, p := range nodes {
			if p != nil {
				p.kill()
			}
		}
		return nil, nil, nil, err
	}
	return nodes, urls, mons, nil
}
