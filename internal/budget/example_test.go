package budget_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/budget"
	"github.com/toolgate/toolgate/pkg/policy"
)

// Code that runs work on an agent's behalf (a delegated sub-task's calls)
// charges them to that agent's and session's budgets, and releases each
// charge when the work ends.
func ExampleEnforcer_Charge() {
	var js jetstream.JetStream // connected, the bus provisioned
	var gate *policy.Gate      // the policy in force
	ctx := context.Background()
	en, err := budget.New(ctx, js, budget.Config{Budgets: func() []policy.Budget { return gate.Policy().Budgets() }})
	if err != nil {
		return
	}
	ch, err := en.Charge(ctx, budget.Use{CallID: "sub-call-1", Agent: "parent-agent", Session: "parent-session", Tool: "bash"})
	var ex *budget.ExceededError
	if errors.As(err, &ex) {
		fmt.Println(ex) // names the budget and when it resets
		return
	}
	if err != nil {
		return // the counters could not be read: do not run (fail closed)
	}
	defer ch.Release(ctx)
	// ... run the sub-call, within ch.Remaining when it is set ...
}
