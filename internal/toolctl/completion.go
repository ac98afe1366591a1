package toolctl

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"text/template"

	"github.com/toolgate/toolgate/internal/version"
)

// shipCommands are the commands about toolctl itself: version and
// completion. completion reads the final command table through cmds and
// the global flags through global, so the scripts it writes follow the
// table with no list of their own.
func shipCommands(cmds *[]command, global *flag.FlagSet) []command {
	return []command{
		{name: "version", summary: "print the version, commit and build date (also toolctl --version)", run: cmdVersion,
			examples: []string{"toolctl version"}},
		{name: "completion", summary: "bash | zsh | fish: print the shell completion script", run: func(ctx context.Context, env *Env, args []string) int {
			return cmdCompletion(ctx, env, args, *cmds, global)
		}, examples: []string{"source <(toolctl completion bash)", "toolctl completion fish > ~/.config/fish/completions/toolctl.fish"}},
	}
}

func cmdVersion(_ context.Context, env *Env, args []string) int {
	fs := env.flagSet("version", "usage: toolctl version\n  prints the module version, the commit and the build date")
	if _, code, ok := parseWords(fs, args, 0, 0); !ok {
		return code
	}
	fmt.Fprintln(env.Stdout, version.Get().String("toolctl"))
	return ExitOK
}

// completionUsage says how to install each script.
const completionUsage = `usage: toolctl completion bash|zsh|fish
  prints the completion script of a shell. Install it with:
    bash: toolctl completion bash > /etc/bash_completion.d/toolctl
          (or: source <(toolctl completion bash) in ~/.bashrc)
    zsh:  toolctl completion zsh > "${fpath[1]}/_toolctl"
    fish: toolctl completion fish > ~/.config/fish/completions/toolctl.fish`

func cmdCompletion(ctx context.Context, env *Env, args []string, cmds []command, global *flag.FlagSet) int {
	fs := env.flagSet("completion", completionUsage)
	words, code, ok := parseWords(fs, args, 1, 1)
	if !ok {
		return code
	}
	var text string
	switch words[0] {
	case "bash":
		text = bashCompletion
	case "zsh":
		text = zshCompletion
	case "fish":
		text = fishCompletion
	default:
		return env.fail(ExitUsage, "completion: unknown shell %q (want bash, zsh or fish)", words[0])
	}
	// Parsed here, the one asked for: not by every toolctl command.
	t, err := template.New(words[0]).Funcs(funcs).Parse(text)
	if err != nil {
		return env.fail(ExitFailed, "completion: %s template: %v", words[0], err)
	}
	if err := t.Execute(env.Stdout, completionSpec(ctx, cmds, global)); err != nil {
		return env.fail(ExitFailed, "completion: %v", err)
	}
	return ExitOK
}

// compCommand is one command as the completion scripts see it.
type compCommand struct {
	Name, Summary string
	// Subs are the subcommand words (policy check, approvals list, ...).
	Subs []string
	// Flags are the command's own flags, without dashes.
	Flags []string
}

// compSpec is what the scripts are rendered from.
type compSpec struct {
	Commands []compCommand
	// Globals are the global flags; ValueFlags those that take a value.
	Globals, ValueFlags []string
}

// subsPattern reads the subcommand words from a summary of the form
// "a | b | c NAME: ...": every alternative before the colon must start
// with a lower-case word.
var subsPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9-]*$`) })

// subcommands are the words a summary lists before its colon.
func subcommands(summary string) []string {
	head, _, ok := strings.Cut(summary, ":")
	if !ok || !strings.Contains(head, "|") {
		return nil
	}
	var subs []string
	for _, alt := range strings.Split(head, "|") {
		f := strings.Fields(alt)
		if len(f) == 0 || !subsPattern().MatchString(f[0]) {
			return nil
		}
		subs = append(subs, f[0])
	}
	return subs
}

// flagLine matches a flag in flag.PrintDefaults output.
var flagLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^  -{1,2}([a-zA-Z][a-zA-Z0-9-]*)`) })

// helpFlags runs a command with --help, its output captured, and returns
// the flags its usage lists: the scripts complete exactly what the
// commands accept. The environment points at no server, so a command that
// does not know --help fails to connect instead of doing anything.
func helpFlags(ctx context.Context, run func(context.Context, *Env, []string) int, args ...string) []string {
	var out bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &out, NATSURL: "nats://127.0.0.1:1", Agent: "completion"}
	ctx, cancel := context.WithCancel(ctx)
	cancel() // nothing a help request does needs time
	run(ctx, env, append(args, "--help"))
	seen := map[string]bool{}
	var flags []string
	for _, m := range flagLine().FindAllStringSubmatch(out.String(), -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			flags = append(flags, m[1])
		}
	}
	sort.Strings(flags)
	return flags
}

func completionSpec(ctx context.Context, cmds []command, global *flag.FlagSet) compSpec {
	var s compSpec
	global.VisitAll(func(f *flag.Flag) {
		s.Globals = append(s.Globals, f.Name)
		if takesValue(f) {
			s.ValueFlags = append(s.ValueFlags, f.Name)
		}
	})
	s.Globals = append(s.Globals, "help", "version")
	for _, c := range cmds {
		cc := compCommand{Name: c.name, Summary: c.summary, Subs: subcommands(c.summary)}
		if c.run == nil { // an entry of the listing only, such as help
			s.Commands = append(s.Commands, cc)
			continue
		}
		if c.name != "completion" && c.name != "version" && c.name != "mcp" && c.name != "hook" {
			cc.Flags = helpFlags(ctx, c.run)
		}
		if c.name == "hook" {
			cc.Flags = helpFlags(ctx, c.run, "serve")
		}
		if c.name == "completion" {
			cc.Subs = []string{"bash", "zsh", "fish"}
		}
		s.Commands = append(s.Commands, cc)
	}
	return s
}

var funcs = template.FuncMap{
	"join": strings.Join,
	"dashed": func(names []string) string {
		d := make([]string, len(names))
		for i, n := range names {
			d[i] = "--" + n
		}
		return strings.Join(d, " ")
	},
	// quote makes a summary safe inside single quotes and zsh's
	// name:description pairs.
	"quote": func(s string) string {
		s = strings.ReplaceAll(s, "'", "")
		return strings.ReplaceAll(s, ":", `\:`)
	},
	"fishquote": func(s string) string { return strings.ReplaceAll(s, "'", `\'`) },
}

// bashCompletion, zshCompletion and fishCompletion are the templates of
// the three scripts.
const bashCompletion = `# bash completion for toolctl: toolctl completion bash
_toolctl() {
  local cur prev cmd="" sub="" i w
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    case "$w" in
      {{range .ValueFlags}}--{{.}}|-{{.}}|{{end}}--nothing) ((i++)) ;;
      -*) ;;
      *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;
    esac
  done
  case "$prev" in
    --creds|-creds|--out|-out|--policy|-policy|--file|-file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    {{range .ValueFlags}}--{{.}}|-{{.}}|{{end}}--nothing) return ;;
  esac
  local words="" flags="{{dashed .Globals}}"
  case "$cmd" in
    "") words="{{range .Commands}}{{.Name}} {{end}}" ;;
{{- range .Commands}}
    {{.Name}}) flags="$flags {{dashed .Flags}}"{{if .Subs}}; [[ -z $sub ]] && words="{{join .Subs " "}}"{{end}} ;;
{{- end}}
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [[ -n $words ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -F _toolctl toolctl
`

const zshCompletion = `#compdef toolctl
# zsh completion for toolctl: toolctl completion zsh > "${fpath[1]}/_toolctl"
_toolctl() {
  local -a commands globals
  commands=(
{{- range .Commands}}
    '{{.Name}}:{{quote .Summary}}'
{{- end}}
  )
  globals=({{dashed .Globals}})
  local cmd="" sub="" i w
  for ((i = 2; i < CURRENT; i++)); do
    w=${words[i]}
    case $w in
      {{range .ValueFlags}}--{{.}}|-{{.}}|{{end}}--nothing) ((i++)) ;;
      -*) ;;
      *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;
    esac
  done
  if [[ ${words[CURRENT]} == -* ]]; then
    local -a flags
    flags=($globals)
    case $cmd in
{{- range .Commands}}{{if .Flags}}
      {{.Name}}) flags+=({{dashed .Flags}}) ;;
{{- end}}{{end}}
    esac
    compadd -- $flags
    return
  fi
  if [[ -z $cmd ]]; then
    _describe 'toolctl command' commands
    return
  fi
  case $cmd in
{{- range .Commands}}{{if .Subs}}
    {{.Name}}) [[ -z $sub ]] && { compadd -- {{join .Subs " "}}; return } ;;
{{- end}}{{end}}
  esac
  _files
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _toolctl "$@"
else
  compdef _toolctl toolctl
fi
`

const fishCompletion = `# fish completion for toolctl: toolctl completion fish > ~/.config/fish/completions/toolctl.fish
set -l toolctl_commands{{range .Commands}} {{.Name}}{{end}}
complete -c toolctl -f
{{- range .Globals}}
complete -c toolctl -l {{.}}
{{- end}}
{{- range .Commands}}
complete -c toolctl -n "not __fish_seen_subcommand_from $toolctl_commands" -a {{.Name}} -d '{{fishquote .Summary}}'
{{- $c := .}}{{range .Subs}}
complete -c toolctl -n "__fish_seen_subcommand_from {{$c.Name}}; and not __fish_seen_subcommand_from {{join $c.Subs " "}}" -a {{.}}
{{- end}}{{range .Flags}}
complete -c toolctl -n "__fish_seen_subcommand_from {{$c.Name}}" -l {{.}}
{{- end}}
{{- end}}
`
