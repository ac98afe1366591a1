package test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestReadOfAFileSwappedUnderTheGate attacks the moment between the gate's
// judgement of a read and the open: notes.txt flips, by atomic renames,
// between a plain file and a link to a key the policy denies, while the
// agent reads it again and again through a real worker. Whatever the
// interleaving (the gate sees the link; the gate sees the file and the
// open finds the link), the key's bytes are never in a result: the open
// that finds a link judges the file it opened, not the path the gate
// allowed.
func TestReadOfAFileSwappedUnderTheGate(t *testing.T) {
	ws := newWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\ndefault: ask\ntools:\n  read:\n    action: allow\n    constraints:\n      denied_paths: [\"**/*.key\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol })
	c := p.client(t, "swapper")
	const secret = "PRIVATE-KEY-BYTES"
	writeFile(t, filepath.Join(ws, "server.key"), secret+"\n")
	writeFile(t, filepath.Join(ws, "notes.txt"), "plain notes\n")

	stop := make(chan struct{})
	var flips atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		plain, link := filepath.Join(ws, ".plain.tmp"), filepath.Join(ws, ".link.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if i%2 == 0 {
				err = os.Symlink("server.key", link)
				if err == nil {
					err = os.Rename(link, filepath.Join(ws, "notes.txt"))
				}
			} else {
				err = os.WriteFile(plain, []byte("plain notes\n"), 0o644)
				if err == nil {
					err = os.Rename(plain, filepath.Join(ws, "notes.txt"))
				}
			}
			if err != nil {
				t.Error(err)
				return
			}
			flips.Add(1)
		}
	}()
	args, _ := json.Marshal(map[string]any{"path": "notes.txt"})
	var read, denied, atOpen, failed int
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end) || read == 0 || atOpen == 0; {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := c.Call(ctx, "read", args)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.Output, secret) {
			close(stop)
			wg.Wait()
			t.Fatalf("the denied key was read through the swapped file: %+v", r)
		}
		switch r.Status {
		case events.StatusOK:
			read++
		case events.StatusDenied:
			denied++
			if r.Decision != nil && r.Decision.Offending != "notes.txt" {
				atOpen++ // judged on the file opened, not the argument
			}
		case events.StatusError:
			// The open itself lost the race (the link changed under
			// it: too many levels of links): an error, nothing read.
			if r.Metadata["error"] != "io" {
				t.Fatalf("read: %+v", r)
			}
			failed++
		default:
			t.Fatalf("read: %+v", r)
		}
		if read+denied+failed > 20000 {
			break
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads served, %d denied (%d of them at the open), %d failed opens, %d flips", read, denied, atOpen, failed, flips.Load())
	if read == 0 || atOpen == 0 {
		t.Fatalf("%d reads served, %d denied at the open: the flips never fell between the gate and the open", read, atOpen)
	}
}
