package bash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/pkg/sandboxinit"
	"github.com/toolgate/toolgate/pkg/tools"
)

// Prepared sandboxes. What a sandboxed call costs before its command runs
// (bwrap: the namespaces, the mount tree of its view and grant; its first
// program's start) is the same for every call of one view. With
// Config.Prepared the tool starts that much ahead, off the calls' path: a
// prepared sandbox is a bwrap whose first program (pkg/sandboxinit,
// WaitArgs) waits on a pipe for the call's command line. A call whose
// sandbox would be built with exactly the same bwrap command line, the
// same environment and the same data (its key: the view, the grant's
// mounts, the identity, the network, whether execution is restricted, the
// sanitised git configs) takes one, if one is ready, and sends it the
// rest: the programs it may execute, the directory it starts in, the
// command. Every prepared sandbox is used by one call and discarded: its
// own namespaces, /tmp, /dev/shm and cgroups, as a sandbox built for the
// call. A call finding none ready is built as without the pool, and one
// is prepared for its key meanwhile.
//
// A mount of the grant (a denied file masked, a protected file bound
// read-only) hangs on the file it covered: when the host removes or
// replaces that file, the kernel detaches the mount in every namespace
// but the one that removed it. So a prepared sandbox's mount table, read
// once its first program waits, must be the same when a call takes it;
// else it is discarded and the call built anew.

// maxPreparedKeys bounds the views the tool keeps prepared sandboxes for;
// the one prepared longest ago makes room for a new one.
const maxPreparedKeys = 4

// preparedPerKey is how many sandboxes are kept ready for one view: two,
// so that a call finds one while the one taken by the call before it is
// still being replaced.
const preparedPerKey = 2

// maxTemplateCalls is how many calls a template serves before it is
// retired.
const maxTemplateCalls = 10000

// templateThreads bounds the processes and threads of a template's own
// cgroup: its runtime's threads and two per call in flight.
const templateThreads = 1024

// prepareTimeout bounds the start of a prepared sandbox.
const prepareTimeout = 30 * time.Second

// pool holds the prepared sandboxes, by key.
type pool struct {
	b       *bash
	mu      sync.Mutex
	ready   map[string][]*prepared
	order   []string       // keys in ready, the oldest first
	filling map[string]int // sandboxes being prepared, by key
	closed  bool
	// seen are the keys of the calls that found no sandbox ready; a
	// second such call prepares some.
	seen map[string]bool
	wg   sync.WaitGroup
	used atomic.Int64 // calls that ran in a prepared sandbox
	// tmpl: the sandboxes prepared are templates (template.go), one per
	// key, in templates (and order) rather than ready.
	tmpl      bool
	templates map[string]*prepared
}

// prepared is a sandbox started ahead of its call.
type prepared struct {
	key        string
	cmd        *exec.Cmd
	g          *group
	req        *os.File // its first program's command line is written here
	outR, errR *os.File
	cc         *callCgroup
	child      int    // the process bwrap runs the first program in
	mounts     []byte // its mount table once it waited
	filterFD   int
	// A template's: its pid, the calls it served and those in flight.
	tpid     int
	calls    atomic.Int64
	inflight sync.WaitGroup
	retired  atomic.Bool
}

// keyFiles passes files to bwrap as sandboxFiles does and hashes the data
// it passes; dry, it only numbers them and hashes the data, to compute a
// call's key without making anything.
type keyFiles struct {
	sandboxFiles
	dry bool
	n   int
	h   hash.Hash
}

func newKeyFiles(dry bool) *keyFiles { return &keyFiles{dry: dry, h: sha256.New()} }

func (k *keyFiles) add(f *os.File) string {
	if k.dry {
		k.n++
		return strconv.Itoa(2 + k.n)
	}
	return k.sandboxFiles.add(f)
}

func (k *keyFiles) data(p []byte) (string, error) {
	k.h.Write([]byte(strconv.Itoa(len(p)) + ":"))
	k.h.Write(p)
	if k.dry {
		return k.add(nil), nil
	}
	return k.sandboxFiles.data(p)
}

// plan is the part of a pooled call's sandbox its key is made of.
type plan struct {
	argv, env []string
	rule      execRule
	write     string
	// sb and grant are the call's view and the mounts of its grant
	// (grantView): a call that finds no sandbox ready builds its own
	// with them, not judging its grant a second time.
	sb       Sandbox
	grant    []string
	filterFD int
	// the descriptors of the hold (info, block), the first program's
	// command line and its readiness
	infoFD, blockFD, reqFD, readyFD string
	key                             string
}

// planFor builds the bwrap command line of a prepared sandbox for the
// call c, passing its files through f (whose order of adds is the same
// dry or not: the key names descriptors by number). create: the files
// the call may write are created when missing, as for the call itself;
// a sandbox prepared ahead creates nothing (grantFor).
//
// With home (a template's: the tasks files of its own cgroups, nil when
// dry), the sandbox is a template (template.go) rather than a sandbox
// for one call.
func (b *bash) planFor(ctx context.Context, c *tools.Call, network, create bool, f *keyFiles, filter, infoW, blockR, reqR, readyW *os.File, home []*os.File) (*plan, error) {
	p := &plan{rule: b.allowlist(c)}
	restrict := p.rule.restrict
	p.filterFD, _ = strconv.Atoi(f.add(filter))
	p.infoFD, p.blockFD = f.add(infoW), f.add(blockR)
	p.reqFD, p.readyFD = f.add(reqR), f.add(readyW)
	var homeFDs []int
	for _, h := range home {
		fd, _ := strconv.Atoi(f.add(h))
		homeFDs = append(homeFDs, fd)
	}
	mounts := []string{"--info-fd", p.infoFD, "--block-fd", p.blockFD}
	sb, gm, write, err := b.grantView(c, create)
	if err != nil {
		return nil, err
	}
	p.sb, p.grant, p.write = sb, gm, write
	mounts = append(mounts, gm...)
	gm, err = b.gitView(ctx, c, p.rule, f.data)
	if err != nil {
		return nil, err
	}
	mounts = append(mounts, gm...)
	mounts = append(mounts, initMounts(b.init)...)
	sid := b.id
	sid.init, sid.noexec = true, restrict && b.noexec
	reqFD, _ := strconv.Atoi(p.reqFD)
	readyFD, _ := strconv.Atoi(p.readyFD)
	inner := sandboxinit.WaitArgs(reqFD, readyFD)
	if home != nil {
		var noexec, keep []string
		if sid.noexec {
			noexec, keep = noexecDirs(b.ws), keepExec
		}
		sid.template, sid.noexec = true, false
		inner = sandboxinit.Template{Ctl: reqFD, Ready: readyFD, Seccomp: p.filterFD, Home: homeFDs,
			Noexec: noexec, KeepExec: keep, Network: network, Limits: rlimitList(b.rlimits())}.Args()
	}
	p.argv = sb.argv(b.ws, "/", network, sid, mounts, inner)
	p.env = callEnv(b.env, sandboxHome(b.ws), "/tmp")
	k := sha256.New()
	rule := fmt.Sprintf("restrict=%t git=%t", p.rule.restrict, p.rule.git)
	for _, part := range [][]string{p.argv, {"env"}, p.env, {rule}} {
		for _, a := range part {
			k.Write([]byte(a))
			k.Write([]byte{0})
		}
	}
	k.Write(f.h.Sum(nil))
	p.key = string(k.Sum(nil))
	return p, nil
}

// pooled reports whether the call can use a prepared sandbox: a sandbox
// with the first program, and no egress relay (whose listener is the
// call's own).
func (b *bash) pooled(network bool) bool {
	return b.pool != nil && b.sb.Enabled() && b.init != "" && !(network && b.proxy != nil)
}

// runPrepared runs the call in a prepared sandbox of its key when one is
// ready (ok); when none is, it prepares one for the next call of the key
// and returns ok false with the call's plan (nil when it could not be
// made): the caller builds the sandbox itself, from the plan's rule and
// grant.
func (b *bash) runPrepared(ctx context.Context, c *tools.Call, command, cwd string, network bool) (res *result, ok bool, p *plan, err error) {
	p, err = b.planFor(ctx, c, network, true, newKeyFiles(true), nil, nil, nil, nil, nil, b.pool.dryHome())
	if err != nil {
		return nil, false, nil, nil // built as without the pool, which says what failed
	}
	// The sandboxes for the next calls of this view are prepared once
	// this one ended (or is built), not beside it; for a view seen for
	// the first time, none: a view that changes with every call (a new
	// file to write each time) would have its sandboxes prepared in
	// vain.
	key := p.key // p is returned nil once the call ran
	if b.pool.tmpl {
		t := b.pool.template(key)
		if t == nil {
			if b.pool.seenBefore(key) {
				b.pool.fill(c, network, key)
			}
			return nil, false, p, nil
		}
		defer b.pool.done(t)
		res, ok, err := b.runTemplated(ctx, c, t, p, command, cwd)
		if !ok {
			return nil, false, p, nil
		}
		return res, true, nil, err
	}
	sb := b.pool.take(key)
	if sb != nil || b.pool.seenBefore(key) {
		defer func() {
			for range preparedPerKey {
				b.pool.fill(c, network, key)
			}
		}()
	}
	if sb == nil {
		return nil, false, p, nil
	}
	if sb.cc != nil {
		defer sb.cc.remove()
	}
	// What the call may execute is its own rule's, whatever the sandbox
	// was prepared for (the key holds whether it is restricted).
	spec := b.initSpec(p.rule.restrict, p.rule.allow)
	spec.AllowDirs = p.rule.dirs
	if p.rule.restrict && b.noexec {
		spec.Noexec, spec.KeepExec = noexecDirs(b.ws), keepExec
	}
	spec.Seccomp, spec.Chdir, spec.Home = sb.filterFD, cwd, sandboxHome(b.ws)
	args := spec.Args(b.direct(command))[1:]
	var line bytes.Buffer
	for _, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			b.pool.discard(sb)
			return nil, false, p, nil
		}
		line.WriteString(a)
		line.WriteByte(0)
	}
	b.pool.used.Add(1)
	pid := sb.cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { _ = sb.g.cancel(pid) })
	defer stop()
	start := time.Now()
	_, err = sb.req.Write(line.Bytes())
	sb.req.Close()
	if err != nil {
		// Its first program is gone: whatever it said is the call's
		// output, as a sandbox that fails to start.
		b.log.Warn("bash: a prepared sandbox is gone", "call_id", c.ID, "err", err)
	}
	res = &result{out: newCapture(b.maxOut), err: newCapture(b.maxOut), exec: p.rule.why, write: p.write}
	res, err = b.await(ctx, c, b.cmdWait(c, sb.cmd, sb.g), sb.outR, sb.errR, sb.cc, start, res, nil)
	return res, true, nil, err
}

// take removes and returns a prepared sandbox of key whose mount table is
// unchanged, or nil; those whose table changed are discarded.
func (p *pool) take(key string) *prepared {
	for {
		p.mu.Lock()
		list := p.ready[key]
		if len(list) == 0 {
			p.mu.Unlock()
			return nil
		}
		sb := list[0]
		p.ready[key] = list[1:]
		if len(p.ready[key]) == 0 {
			delete(p.ready, key)
			p.order = deleteKey(p.order, key)
		}
		p.mu.Unlock()
		now, err := os.ReadFile("/proc/" + strconv.Itoa(sb.child) + "/mountinfo")
		if err == nil && bytes.Equal(now, sb.mounts) {
			return sb
		}
		p.b.log.Debug("bash: a prepared sandbox's mounts changed; discarded", "err", err)
		go p.discard(sb) // not on the call's path
	}
}

// maxSeenKeys bounds the keys of views seen once that the pool keeps.
const maxSeenKeys = 256

// seenBefore reports whether a call of key found no sandbox ready before,
// and remembers that one did now.
func (p *pool) seenBefore(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[key] {
		return true
	}
	if len(p.seen) >= maxSeenKeys {
		clear(p.seen)
	}
	p.seen[key] = true
	return false
}

// fill prepares a sandbox (a template, with p.tmpl) for the view of call
// c, whose key is key, in the background, unless enough are ready or
// being prepared for it.
func (p *pool) fill(c *tools.Call, network bool, key string) {
	cc := *c // the fields the view is made of; never its output
	cc.Progress = nil
	p.mu.Lock()
	defer p.mu.Unlock()
	held, perKey := len(p.ready[key]), preparedPerKey
	if p.tmpl {
		held, perKey = 0, 1
		if p.templates[key] != nil {
			held = 1
		}
	}
	if p.closed || p.filling[key]+held >= perKey {
		return
	}
	p.filling[key]++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
		defer cancel()
		sb, err := p.b.prepare(ctx, &cc, network, p.tmpl)
		p.mu.Lock()
		if p.filling[key]--; p.filling[key] <= 0 {
			delete(p.filling, key)
		}
		if err != nil || p.closed || sb.key != key {
			p.mu.Unlock()
			if err != nil {
				p.b.log.Debug("bash: cannot prepare a sandbox", "template", p.tmpl, "err", err)
			}
			if sb != nil {
				p.discard(sb)
			}
			return
		}
		var evict []*prepared
		_, known := p.ready[key]
		if p.tmpl {
			_, known = p.templates[key]
		}
		if !known {
			for len(p.order) >= maxPreparedKeys {
				evict = append(evict, p.ready[p.order[0]]...)
				if t := p.templates[p.order[0]]; t != nil {
					evict = append(evict, t)
				}
				delete(p.ready, p.order[0])
				delete(p.templates, p.order[0])
				p.order = p.order[1:]
			}
			p.order = append(p.order, key)
		}
		if p.tmpl {
			p.templates[key] = sb
		} else {
			p.ready[key] = append(p.ready[key], sb)
		}
		p.mu.Unlock()
		for _, e := range evict {
			p.retire(e)
		}
	}()
}

func deleteKey(keys []string, key string) []string {
	for i, k := range keys {
		if k == key {
			return append(keys[:i:i], keys[i+1:]...)
		}
	}
	return keys
}

// discard kills a prepared sandbox that no call will use and frees what
// it held.
func (p *pool) discard(sb *prepared) {
	sb.req.Close()
	_ = sb.g.finish(sb.cmd.Process.Pid)
	_ = sb.cmd.Wait()
	sb.outR.Close()
	sb.errR.Close()
	if sb.cc != nil {
		sb.cc.remove()
	}
}

// close discards every prepared sandbox and waits for those being
// prepared.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	var all []*prepared
	for _, l := range p.ready {
		all = append(all, l...)
	}
	p.ready, p.order = map[string][]*prepared{}, nil
	var tmpls []*prepared
	for _, t := range p.templates {
		tmpls = append(tmpls, t)
	}
	p.mu.Unlock()
	for _, sb := range all {
		p.discard(sb)
	}
	for _, t := range tmpls {
		p.retire(t)
	}
	p.wg.Wait()
}

// errNotReady says a prepared sandbox did not reach its first program.
var errNotReady = errors.New("the prepared sandbox did not start")

// prepare starts a sandbox for the view of call c whose first program
// waits for its command line: bwrap held until its limits are set, in
// the call's cgroups from birth, as run starts one. tmpl: the sandbox is
// a template (template.go), in cgroups of its own, which serves calls
// on the socket sb.req; its stderr is logged.
func (b *bash) prepare(ctx context.Context, c *tools.Call, network, tmpl bool) (_ *prepared, err error) {
	// The worker's ends are closed unless the sandbox is returned; the
	// ends bwrap gets (f's) once it started.
	f := newKeyFiles(false)
	defer f.close()
	var mine []*os.File
	defer func() {
		if err != nil {
			for _, m := range mine {
				m.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File) {
		if err == nil {
			if r, w, err = os.Pipe(); err == nil {
				mine = append(mine, r, w)
			}
		}
		return r, w
	}
	var reqR, reqW *os.File
	if tmpl {
		reqR, reqW, err = socketPair(syscall.SOCK_SEQPACKET)
		if err == nil {
			mine = append(mine, reqR, reqW)
		}
	} else {
		reqR, reqW = pipe()
	}
	readyR, readyW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		return nil, fmt.Errorf("bash: prepare a sandbox: %w", err)
	}
	defer readyR.Close()
	sb := &prepared{req: reqW, outR: outR, errR: errR, g: &group{}}
	var cgFD *os.File
	if b.cg != nil {
		// A template's cgroups bound the template (its threads: about
		// two per call in flight), not a call's processes.
		procs := b.limits.Processes
		if tmpl {
			procs = templateThreads
		}
		if sb.cc, err = b.cg.newCall(procs, b.limits.Memory); err != nil {
			return nil, fmt.Errorf("bash: per-call cgroup: %w", err)
		}
		if sb.cc.v2 {
			if cgFD, err = sb.cc.open(); err != nil {
				sb.cc.remove()
				return nil, fmt.Errorf("bash: per-call cgroup: %w", err)
			}
			defer cgFD.Close()
		}
	}
	var home []*os.File
	if tmpl {
		// The tasks files the template's starting threads go back to.
		if sb.cc == nil || sb.cc.v2 {
			return nil, errors.New("bash: a sandbox template needs cgroup v1")
		}
		if home, err = openTasks(sb.cc); err != nil {
			sb.cc.remove()
			return nil, err
		}
	}
	filter, err := seccompFile()
	if err != nil {
		return nil, err
	}
	held, infoW, blockR, err := newHold()
	if err != nil {
		filter.Close()
		return nil, err
	}
	defer held.close()
	p, err := b.planFor(ctx, c, network, false, f, filter, infoW, blockR, reqR, readyW, home)
	if err != nil {
		if sb.cc != nil {
			sb.cc.remove()
		}
		return nil, err
	}
	sb.key, sb.filterFD = p.key, p.filterFD
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = outW, errW
	if tmpl {
		cmd.Stdout = nil // /dev/null: the template says what fails on stderr
	}
	cmd.ExtraFiles = f.files
	cmd.SysProcAttr = sysProcAttr(identity{})
	if cgFD != nil {
		intoCgroup(cmd.SysProcAttr, int(cgFD.Fd()))
	}
	cmd.WaitDelay = waitDelay
	if sb.cc != nil && !sb.cc.v2 {
		err = sb.cc.startIn(cmd)
	} else {
		err = cmd.Start()
	}
	outW.Close()
	errW.Close()
	f.close()
	if err != nil {
		if sb.cc != nil {
			sb.cc.remove()
		}
		return nil, fmt.Errorf("bash: start a prepared sandbox: %w", err)
	}
	sb.cmd = cmd
	if tmpl {
		go b.logTemplate(errR)
		sb.errR = nil
	}
	fail := func(e error) (*prepared, error) {
		b.pool.discard(sb)
		return nil, e
	}
	// A template keeps no limit of a call's but core files off: it sets
	// them on each call's command (its runtime would not start
	// within a call's address space, nor live within its CPU time).
	limits := b.rlimits()
	if tmpl {
		limits = Limits{}
	}
	if sb.child, err = held.releasePid(limits); err != nil {
		return fail(err)
	}
	if sb.child <= 1 {
		return fail(errNotReady)
	}
	// The first program says it waits (its mounts are all made) with a
	// byte on the readiness pipe.
	if err := readyR.SetReadDeadline(time.Now().Add(prepareTimeout)); err != nil {
		return fail(err)
	}
	if _, err := io.ReadFull(readyR, make([]byte, 1)); err != nil {
		return fail(fmt.Errorf("%w: %w", errNotReady, err))
	}
	if sb.mounts, err = os.ReadFile("/proc/" + strconv.Itoa(sb.child) + "/mountinfo"); err != nil {
		return fail(fmt.Errorf("%w: %w", errNotReady, err))
	}
	if tmpl {
		if sb.tpid, err = templatePid(sb.child); err != nil {
			return fail(fmt.Errorf("%w: %w", errNotReady, err))
		}
	}
	return sb, nil
}

// dryHome stands for a template's cgroups' tasks files in a dry plan (the
// key): nil when prepared sandboxes are not templates.
func (p *pool) dryHome() []*os.File {
	if !p.tmpl {
		return nil
	}
	if p.b.cg.memory {
		return make([]*os.File, 2)
	}
	return make([]*os.File, 1)
}

// template is the ready template of key, whose mount table is unchanged,
// counted in flight until done is called; nil when there is none (and
// one whose table changed is retired).
func (p *pool) template(key string) *prepared {
	p.mu.Lock()
	t := p.templates[key]
	if t != nil {
		t.inflight.Add(1)
	}
	p.mu.Unlock()
	if t == nil {
		return nil
	}
	now, err := os.ReadFile("/proc/" + strconv.Itoa(t.child) + "/mountinfo")
	if err == nil && bytes.Equal(now, t.mounts) {
		return t
	}
	p.b.log.Debug("bash: a sandbox template's mounts changed; retired", "err", err)
	t.inflight.Done()
	p.retire(t)
	return nil
}

// done ends a call of the template t, and retires t when it served its
// share.
func (p *pool) done(t *prepared) {
	n := t.calls.Add(1)
	t.inflight.Done()
	if n == maxTemplateCalls {
		p.retire(t)
	}
}

// retire takes the template t out of use and discards it once its calls
// ended.
func (p *pool) retire(t *prepared) {
	if t.retired.Swap(true) {
		return
	}
	p.mu.Lock()
	if p.templates[t.key] == t {
		delete(p.templates, t.key)
		p.order = deleteKey(p.order, t.key)
	}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t.inflight.Wait()
		p.discard(t)
	}()
}
