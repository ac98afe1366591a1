package approval

import (
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolgate/toolgate/pkg/approval"
)

var updateContract = flag.Bool("update-contract", false, "rewrite docs/schemas/approval-refused.json and approval-resolved.json")

// TestPayloadSchemasMatchDocs checks the schemas docs/asyncapi.yaml gives
// the refused and resolved events against the types published here.
func TestPayloadSchemasMatchDocs(t *testing.T) {
	for file, typ := range map[string]reflect.Type{
		"approval-refused.json":  reflect.TypeFor[refusal](),
		"approval-resolved.json": reflect.TypeFor[resolution](),
	} {
		s, err := jsonschema.ForType(typ, &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
			reflect.TypeFor[time.Time](): {Type: "string", Format: "date-time"},
			// An amendment's grant is a decision, and a decision may ask
			// for an amendment: refer to the decision's schema instead of
			// repeating it (and going round).
			reflect.TypeFor[approval.Decision](): {Type: "object", Ref: "approval-decision.json",
				Description: "the signed decision that granted the amendment"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		s.Schema = "https://json-schema.org/draft/2020-12/schema"
		s.ID = "https://toolgate.dev/schemas/" + file
		b, _ := json.Marshal(s)
		var m any
		_ = json.Unmarshal(b, &m)
		openObjects(m) // consumers ignore unknown fields
		got, _ := json.MarshalIndent(m, "", "  ")
		got = append(got, '\n')
		path := "../../docs/schemas/" + file
		if *updateContract {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./internal/approval -run PayloadSchemas -update-contract)", err)
		}
		if string(got) != string(want) {
			t.Errorf("docs/schemas/%s differs from %s: rerun with -update-contract and review", file, typ)
		}
	}
}

// openObjects drops "additionalProperties": false everywhere in a schema.
func openObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		if ap, ok := v["additionalProperties"].(bool); ok && !ap {
			delete(v, "additionalProperties")
		}
		for _, c := range v {
			openObjects(c)
		}
	case []any:
		for _, c := range v {
			openObjects(c)
		}
	}
}
