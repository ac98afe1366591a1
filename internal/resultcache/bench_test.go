package resultcache_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/resultcache"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
)

// BenchmarkCache runs one read of a 1 MiB file and one grep over 2,000
// files through the pipeline, with the cache (every call after the first
// a hit) and without it.
func BenchmarkCache(b *testing.B) {
	srv := testenv.StartNATS(b, "")
	_, js := srv.Connect(b)
	if err := bus.Provision(context.Background(), js, bus.Config{}); err != nil {
		b.Fatal(err)
	}
	ws := b.TempDir()
	line := strings.Repeat("x", 99) + "\n"
	if err := os.WriteFile(filepath.Join(ws, "big.txt"), []byte(strings.Repeat(line, 10486)), 0o644); err != nil {
		b.Fatal(err)
	}
	for i := range 2000 {
		dir := filepath.Join(ws, "src", fmt.Sprint(i%40))
		_ = os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.go", i)), []byte(strings.Repeat(line, 40)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Config{Workspace: ws}); err != nil {
		b.Fatal(err)
	}
	c, err := resultcache.New(context.Background(), js, resultcache.Config{Enabled: true}, quiet, ws)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, call := range []struct{ tool, args string }{
		{"read", `{"path":"big.txt","limit":100000}`},
		{"grep", `{"pattern":"needle","path":"src"}`},
	} {
		for _, cached := range []bool{false, true} {
			var opts []tools.PipelineOption
			if cached {
				opts = append(opts, tools.Use(c.Middleware))
			}
			p := tools.NewPipeline(reg, opts...)
			b.Run(fmt.Sprintf("%s/cached=%v", call.tool, cached), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					x := &tools.Call{ID: fmt.Sprint(i), Agent: "bench", Name: call.tool, Arguments: json.RawMessage(call.args)}
					out, err := p.Handle(context.Background(), x)
					if err != nil || out.IsError {
						b.Fatalf("%v %+v", err, out)
					}
					if cached && i > 0 && !out.Cached {
						b.Fatal("not served from the cache")
					}
				}
			})
		}
	}
}
