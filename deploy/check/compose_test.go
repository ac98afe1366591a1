package check

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

const composeFile = "../compose/compose.yaml"

func loadCompose(t *testing.T, file string) (*types.Project, error) {
	t.Helper()
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping{},
	}, loader.WithProfiles([]string{"*"}))
}

// TestCompose loads the laptop trial with the compose-spec loader (the
// schema and the semantics docker compose applies) and checks the fleet it
// describes: 3 NATS nodes in one cluster, 2 workers able to sandbox, the
// approver, every file it mounts present.
func TestCompose(t *testing.T) {
	p, err := loadCompose(t, composeFile)
	if err != nil {
		t.Fatalf("compose: %v", err)
	}
	var nats, workers []types.ServiceConfig
	for _, s := range p.Services {
		switch {
		case strings.HasPrefix(s.Image, "nats:"):
			nats = append(nats, s)
		case strings.HasPrefix(s.Image, "toolgate/worker:") && s.Name != "init":
			workers = append(workers, s)
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s mounts %s: %v", s.Name, v.Source, err)
				}
			}
		}
	}
	if len(nats) != 3 || len(workers) != 2 {
		t.Fatalf("%d NATS nodes and %d workers, want 3 and 2", len(nats), len(workers))
	}
	for _, n := range nats {
		if !slices.Contains(n.Command, n.Name) || n.DependsOn["init"].Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: command %v, depends on %v", n.Name, n.Command, n.DependsOn)
		}
	}
	for _, w := range workers {
		for _, opt := range []string{"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} {
			if !slices.Contains(w.SecurityOpt, opt) {
				t.Errorf("%s lacks security_opt %s, which bubblewrap needs", w.Name, opt)
			}
		}
		if w.Privileged || len(w.CapAdd) > 0 || !slices.Contains(w.CapDrop, "ALL") {
			t.Errorf("%s: privileged %v, cap_add %v, cap_drop %v", w.Name, w.Privileged, w.CapAdd, w.CapDrop)
		}
		if !slices.Contains(w.Command, "--sandbox=require") || !slices.Contains(w.Command, "--replicas=3") {
			t.Errorf("%s: command %v", w.Name, w.Command)
		}
	}
	a, err := p.GetService("approver")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Ports) != 1 || a.Ports[0].Target != 8470 {
		t.Errorf("approver ports %+v", a.Ports)
	}
}

// TestComposeLoaderBites: a misspelt key fails the load.
func TestComposeLoaderBites(t *testing.T) {
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "compose.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(b), "security_opt:", "securty_opt:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCompose(t, bad); err == nil {
		t.Fatal("a misspelt key loaded")
	}
}
