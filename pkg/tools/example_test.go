package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
)

func ExampleRegistry() {
	reg := tools.NewRegistry()
	err := reg.Register(&tools.Tool{
		Name:        "greet",
		Aliases:     []string{"say_hello"},
		Description: "Greets someone.",
		Kind:        policy.KindOther,
		Parameters:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","minLength":1}},"required":["name"]}`),
		Handler: tools.HandlerFunc(func(ctx context.Context, c *tools.Call) (*tools.Output, error) {
			return &tools.Output{Content: "hello, " + c.Args["name"].(string)}, nil
		}),
	})
	fmt.Println("register:", err)

	p := tools.NewPipeline(reg)
	out, err := p.Handle(context.Background(), &tools.Call{ID: "c1", Agent: "a", Name: "say_hello", Arguments: json.RawMessage(`{"name":"Ada"}`)})
	fmt.Println(out.Content, err)

	_, err = p.Handle(context.Background(), &tools.Call{ID: "c2", Agent: "a", Name: "greet", Arguments: json.RawMessage(`{"name":""}`)})
	fmt.Println(errors.Is(err, tools.ErrInvalidArguments), err)

	_, err = p.Handle(context.Background(), &tools.Call{ID: "c3", Agent: "a", Name: "gret"})
	fmt.Println(err)
	// Output:
	// register: <nil>
	// hello, Ada <nil>
	// true invalid arguments for greet: name: length must be >= 1, but got 0
	// unknown tool "gret"; available tools: greet
}
