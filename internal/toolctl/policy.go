package toolctl

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/approvalcli"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/policycli"
	"github.com/toolgate/toolgate/internal/policyload"
	"github.com/toolgate/toolgate/internal/trust"
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
	creds := fs.String("creds", env.Creds, "admin credentials (.creds) the policy is signed with (env TOOLGATE_CREDS; default minted from the state directory's keys)")
	if err := fs.Parse(reorder(args)); err != nil {
		return ExitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(env.Stderr, "usage: toolctl policy push [--creds FILE] FILE")
		return ExitUsage
	}
	file := fs.Arg(0)
	data, err := os.ReadFile(file)
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	signer, err := adminSigner(*creds)
	if err != nil {
		return env.fail(ExitUsage, "policy not pushed: %v", err)
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
	p, warns, err := policyload.Push(ctx, kv, data, file, signer)
	if err != nil {
		return env.fail(ExitFailed, "policy not pushed:\n%v", err)
	}
	for _, w := range warns {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	fmt.Fprintf(env.Stdout, "pushed %s as the shared policy, revision %s\n", file, p.Revision())
	return ExitOK
}

// adminSigner finds the admin credentials a pushed policy is signed with:
// the file given, else $TOOLGATE_CREDS, else minted from the calling
// user's install.
func adminSigner(creds string) (trust.Signer, error) {
	c, err := identity.Resolve(creds, identity.RoleAdmin, "admin")
	if err != nil {
		return trust.Signer{}, fmt.Errorf("workers accept only policies signed by an admin (--creds FILE or TOOLGATE_CREDS): %w", err)
	}
	return trust.Signer{Key: c.Key, JWT: c.JWT}, nil
}

// reorder puts flags before the positional arguments, so that
// "push FILE --creds C" parses like "push --creds C FILE".
func reorder(args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			rest = append(rest, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			rest = append(rest, a)
		}
	}
	return append(flags, rest...)
}

func cmdApprovals(ctx context.Context, env *Env, args []string) int {
	return approvalcli.Run(append([]string{"approvals"}, args...), env.Stdout, env.Stderr)
}
