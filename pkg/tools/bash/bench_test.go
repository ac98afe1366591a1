package bash_test

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/bash"
)

func benchModes(b *testing.B, fn func(b *testing.B, mode bash.Mode)) {
	b.Run("off", func(b *testing.B) { fn(b, bash.ModeOff) })
	b.Run("bwrap", func(b *testing.B) {
		testenv.LookPath(b, "bwrap", "bubblewrap")
		fn(b, bash.ModeRequire)
	})
}

func benchTool(b *testing.B, mode bash.Mode) *tools.Tool {
	b.Helper()
	ws := newWorkspace(b, testUID)
	tool, err := bash.New(bash.Config{Workspace: ws, Sandbox: mode})
	if err != nil {
		b.Fatal(err)
	}
	return tool
}

// BenchmarkCall is the cost of one call of a command that does nothing:
// process start, limits, the sandbox when there is one, and teardown.
func BenchmarkCall(b *testing.B) {
	benchModes(b, func(b *testing.B, mode bash.Mode) {
		tool := benchTool(b, mode)
		args := json.RawMessage(`{"command":"true"}`)
		for b.Loop() {
			out, err := tool.Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: args})
			if err != nil || out.IsError {
				b.Fatalf("%+v %v", out, err)
			}
		}
	})
}

// BenchmarkOutput is the rate at which a call takes output from a command
// that prints 256 MB, bounded capture and progress streaming included.
func BenchmarkOutput(b *testing.B) {
	benchModes(b, func(b *testing.B, mode bash.Mode) {
		tool := benchTool(b, mode)
		const size = 256 << 20
		args := json.RawMessage(`{"command":"head -c 268435456 /dev/zero"}`)
		b.SetBytes(size)
		for b.Loop() {
			out, err := tool.Handler.Handle(context.Background(), &tools.Call{Name: "bash", Arguments: args, Progress: func(string, string) {}})
			if err != nil || out.Metadata["stdout_bytes"] != int64(size) {
				b.Fatalf("%v %v", out.Metadata, err)
			}
		}
	})
}

// BenchmarkBaselineExec is the floor under BenchmarkCall: os/exec running
// the same command with bash and nothing else (no limits, no sandbox, no
// capture bound, same user).
func BenchmarkBaselineExec(b *testing.B) {
	bash := testenv.LookPath(b, "bash", "bash")
	for b.Loop() {
		if err := exec.Command(bash, "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineOutput is the floor under BenchmarkOutput: os/exec
// reading the same 256 MB into io.Discard.
func BenchmarkBaselineOutput(b *testing.B) {
	const size = 256 << 20
	b.SetBytes(size)
	for b.Loop() {
		cmd := exec.Command("bash", "-c", "head -c 268435456 /dev/zero")
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}
