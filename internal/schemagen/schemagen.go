// Package schemagen writes the JSON Schema documents of the event payloads
// committed under docs/schemas, from the Go types, so that the documents
// and the code cannot drift (the tests that check them call Payload).
package schemagen

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolgate/toolgate/pkg/approval"
)

// Payload is the JSON Schema document, named name under docs/schemas, of
// the payload type typ, indented and ending in a newline.
func Payload(name string, typ reflect.Type) ([]byte, error) {
	known := map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {Description: "any JSON value"},
		reflect.TypeFor[time.Time]():       {Type: "string", Format: "date-time"},
	}
	// A decision asks for an amendment (always_allow) and a stored
	// amendment carries the decision that granted it (grant): the types
	// refer to each other, so the amendment's grant refers to the decision
	// schema instead of repeating it.
	known[reflect.TypeFor[approval.Decision]()] = &jsonschema.Schema{
		Type:        "object",
		Ref:         "approval-decision.json",
		Description: "the signed decision that granted the amendment",
	}
	amendment, err := jsonschema.ForType(reflect.TypeFor[approval.Amendment](), &jsonschema.ForOptions{TypeSchemas: known})
	if err != nil {
		return nil, fmt.Errorf("schema of approval.Amendment: %w", err)
	}
	delete(known, reflect.TypeFor[approval.Decision]())
	known[reflect.TypeFor[approval.Amendment]()] = amendment
	s, err := jsonschema.ForType(typ, &jsonschema.ForOptions{TypeSchemas: known})
	if err != nil {
		return nil, fmt.Errorf("schema of %s: %w", typ, err)
	}
	s.Schema = "https://json-schema.org/draft/2020-12/schema"
	s.ID = "https://toolgate.dev/schemas/" + name
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schema of %s: %w", typ, err)
	}
	// Consumers ignore fields they do not know (a new optional field is not
	// a breaking change), so the schemas do not forbid them.
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	openObjects(m)
	b, err = json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
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
