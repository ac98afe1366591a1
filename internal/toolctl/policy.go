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
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
)

// policyUsage is the whole `toolctl policy` usage: the file commands of
// policycli and the fleet commands below.
func policyUsage() string {
	return strings.Replace(policycli.Usage(), "usage:\n", "usage: toolctl policy COMMAND\n", 1) +
		"  policy push FILE\n      validate FILE and make it the policy of every worker started without --policy\n" +
		"  policy amendments list | revoke ID\n      the always-allow amendments people granted when approving\n" +
		"  policy replay FILE [--since DURATION] [--until TIME] [--agent GLOB] [--tool NAME] [--json] [--html FILE]\n" +
		"      judge the audited calls again under FILE (the trail verified first) and print what would change;\n" +
		"      exits 0 when nothing would, 6 when something would, 1 on errors\n"
}

// cmdPolicy: check and lint work on files (no bus); push stores a policy
// for the fleet; amendments lists and revokes "always allow" grants.
func cmdPolicy(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, policyUsage())
		return ExitUsage
	}
	switch args[0] {
	case "push":
		return policyPush(ctx, env, args[1:])
	case "replay":
		return policyReplay(ctx, env, args[1:])
	case "amendments":
		amArgs := withNATS(args[1:], env.NATSURL)
		if env.Creds != "" {
			amArgs = append(amArgs, "--creds", env.Creds)
		}
		return approvalcli.Run(append([]string{"amendments"}, amArgs...), env.Stdout, env.Stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(env.Stdout, policyUsage())
		return ExitOK
	default:
		return policycli.Run(args, env.Stdout, env.Stderr)
	}
}

// withNATS adds --nats URL after the subcommand word of args, so that the
// delegated command reaches the same server as the rest of toolctl.
func withNATS(args []string, url string) []string {
	if len(args) == 0 {
		return nil
	}
	return append([]string{args[0], "--nats", url}, args[1:]...)
}

func policyPush(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("policy push", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	creds := fs.String("creds", env.Creds, "admin credentials (.creds) the policy is signed with (env TOOLGATE_CREDS; default minted from the state directory's keys)")
	fs.Usage = func() { fmt.Fprintln(env.Stderr, "usage: toolctl policy push [--creds FILE] FILE") }
	words, code, ok := parseWords(fs, args, 1, 1)
	if !ok {
		return code
	}
	file := words[0]
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
		return env.fail(ExitFailed, "policy not pushed:\n%v", policy.Suggest(err))
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
	return trust.SignerOf(c), nil
}

func cmdApprovals(ctx context.Context, env *Env, args []string) int {
	return approvalcli.Run(append([]string{"approvals"}, args...), env.Stdout, env.Stderr)
}
