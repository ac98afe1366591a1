package toolctl

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/toolgate/toolgate/internal/approvalcli"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/policycli"
	"github.com/toolgate/toolgate/internal/policyload"
)

// cmdPolicy: check and lint work on files (no bus); push stores a policy
// for the fleet; amendments lists and revokes "always allow" grants.
func cmdPolicy(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		policycli.Run(nil, env.Stdout, env.Stderr)
		fmt.Fprintln(env.Stderr, "  policy push FILE\n      validate FILE and make it the policy of every worker started without --policy")
		fmt.Fprintln(env.Stderr, "  policy amendments list | revoke ID\n      the always-allow amendments people granted when approving")
		return ExitUsage
	}
	switch args[0] {
	case "push":
		return policyPush(ctx, env, args[1:])
	case "amendments":
		return approvalcli.Run(append(append([]string{"amendments"}, args[1:]...), "--nats", env.NATSURL, "--creds", env.Creds), env.Stdout, env.Stderr)
	default:
		return policycli.Run(args, env.Stdout, env.Stderr)
	}
}

func policyPush(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("policy push", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(env.Stderr, "usage: toolctl policy push FILE")
		return ExitUsage
	}
	file := fs.Arg(0)
	data, err := os.ReadFile(file)
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	nc, js, code := env.jetStream()
	if js == nil {
		return code
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bus.BucketPolicy)
	if err != nil {
		return env.fail(ExitNoReach, "policy bucket (has a worker provisioned the bus?): %v", err)
	}
	p, warns, err := policyload.Push(ctx, kv, data, file)
	if err != nil {
		return env.fail(ExitFailed, "policy not pushed:\n%v", err)
	}
	for _, w := range warns {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	fmt.Fprintf(env.Stdout, "pushed %s as the shared policy, revision %s\n", file, p.Revision())
	return ExitOK
}

func cmdApprovals(ctx context.Context, env *Env, args []string) int {
	return approvalcli.Run(append([]string{"approvals"}, args...), env.Stdout, env.Stderr)
}
