package toolctl

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// follower prints a call's progress as it arrives (`toolctl call
// --follow`): a command's stdout on stdout and its stderr on stderr, a
// tool's status notes on stderr after "toolctl: ". It remembers what it
// printed, so that the result's output is printed again only when the
// stream did not carry all of it (progress is bounded and best effort).
type follower struct {
	stdout, stderr io.Writer

	mu       sync.Mutex
	streamed map[string]*strings.Builder
	lastSeq  int64
	gaps     bool
}

func newFollower(stdout, stderr io.Writer) *follower {
	return &follower{stdout: stdout, stderr: stderr, streamed: map[string]*strings.Builder{}}
}

// progress prints one progress message.
func (f *follower) progress(p events.ProgressData) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.Seq != f.lastSeq+1 {
		f.gaps = true // lost or out of order (core NATS is best effort)
	}
	f.lastSeq = max(f.lastSeq, p.Seq)
	b := f.streamed[p.Stream]
	if b == nil {
		b = &strings.Builder{}
		f.streamed[p.Stream] = b
	}
	b.WriteString(p.Chunk)
	switch p.Stream {
	case tools.StreamStdout:
		fmt.Fprint(f.stdout, p.Chunk)
	case tools.StreamStatus:
		for _, line := range strings.Split(strings.TrimRight(p.Chunk, "\n"), "\n") {
			fmt.Fprintln(f.stderr, "toolctl: "+line)
		}
	default:
		fmt.Fprint(f.stderr, p.Chunk)
	}
}

// complete reports whether the stream carried the whole output of res:
// for a command, its stdout and stderr as the result has them; for any
// other tool, the result's output on stdout.
func (f *follower) complete(res *events.ResultData) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gaps || f.lastSeq == 0 {
		return false
	}
	got := func(stream string) string {
		if b := f.streamed[stream]; b != nil {
			return b.String()
		}
		return ""
	}
	out, hasOut := res.Metadata["stdout"].(string)
	errText, _ := res.Metadata["stderr"].(string)
	if hasOut {
		return got(tools.StreamStdout) == out && got(tools.StreamStderr) == errText
	}
	return got(tools.StreamStdout) == res.Output
}

// newline ends the streamed stdout with a line break if it lacks one, so
// that what follows starts on its own line.
func (f *follower) newline() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.streamed[tools.StreamStdout]; b != nil && b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		fmt.Fprintln(f.stdout)
	}
}
