package toolformat_test

import (
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/toolformat"
)

func ExampleConvert() {
	list := []events.ToolData{{
		Name:        "read",
		Description: "Read a text file.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
	}}
	d, _ := toolformat.Convert(list, toolformat.Anthropic)
	b, _ := json.Marshal(d.Tools)
	fmt.Println(string(b))
	// Output:
	// [{"name":"read","description":"Read a text file.","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]
}
