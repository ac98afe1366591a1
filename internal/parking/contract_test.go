package parking

import (
	"flag"
	"os"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/internal/schemagen"
)

var updateContract = flag.Bool("update-contract", false, "rewrite docs/schemas/approval-refused.json and approval-resolved.json")

// TestPayloadSchemasMatchDocs checks the schemas docs/asyncapi.yaml gives
// the refused and resolved events against the types published here.
func TestPayloadSchemasMatchDocs(t *testing.T) {
	for file, typ := range map[string]reflect.Type{
		"approval-refused.json":  reflect.TypeFor[Refusal](),
		"approval-resolved.json": reflect.TypeFor[resolution](),
	} {
		got, err := schemagen.Payload(file, typ)
		if err != nil {
			t.Fatal(err)
		}
		path := "../../docs/schemas/" + file
		if *updateContract {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./internal/parking -run PayloadSchemas -update-contract)", err)
		}
		if string(got) != string(want) {
			t.Errorf("docs/schemas/%s differs from %s: rerun with -update-contract and review", file, typ)
		}
	}
}
