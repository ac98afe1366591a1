package toolctl

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// parseFlags parses args into fs with flags and words in any order, as
// people type them: `call --json '{...}' read` and `call read --json
// '{...}'` mean the same. "--" ends the flags; everything after it is a
// word even when it starts with a dash. It returns the words in order.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			return append(words, args[1:]...), nil
		}
		if !isFlag(a) {
			words = append(words, a)
			args = args[1:]
			continue
		}
		n := 1
		if name, hasValue := flagName(a); !hasValue && takesValue(fs.Lookup(name)) && len(args) > 1 {
			n = 2
		}
		// The flag package parses exactly this flag and its value.
		if err := fs.Parse(args[:n]); err != nil {
			return nil, err
		}
		args = args[n:]
	}
	return words, nil
}

// isFlag reports whether a command-line word is a flag: it starts with a
// dash and is more than a dash ("-" alone names standard input).
func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' }

// flagName returns the name of a flag word (-x, --x, --x=v) and whether
// the word carries its value.
func flagName(a string) (string, bool) {
	name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	name, _, hasValue := strings.Cut(name, "=")
	return name, hasValue
}

// takesValue reports whether f needs the next word as its value (every
// flag but a boolean one).
func takesValue(f *flag.Flag) bool {
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// takeGlobals removes the global flags (those defined in global) from a
// command's arguments, wherever they are before "--", and sets them;
// except lists flags the command defines itself under the same name. It
// returns the remaining arguments.
func takeGlobals(global *flag.FlagSet, args []string, except ...string) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i:]...), nil
		}
		name, hasValue := flagName(a)
		f := global.Lookup(name)
		if !isFlag(a) || f == nil || contains(except, name) {
			rest = append(rest, a)
			continue
		}
		word := []string{a}
		if !hasValue && takesValue(f) && i+1 < len(args) {
			i++
			word = append(word, args[i])
		}
		if err := global.Parse(word); err != nil {
			return nil, err
		}
		if global.NArg() > 0 {
			return nil, errors.New("flag " + a + " needs a value")
		}
	}
	return rest, nil
}

// usageCode is the exit code after a flag error: asking for help is not a
// failure.
func usageCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	return ExitUsage
}

// flagSet is the flag set of a subcommand: errors and help go to
// env.Stderr, and -h prints usage then the flags.
func (e *Env) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.Stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseWords parses args into fs as parseFlags does and checks that
// between min and max words remain (max < 0: no upper bound). When the
// flags or the words are wrong it prints the usage and returns ok false
// with the exit code to return: ExitOK for -h, else ExitUsage.
func parseWords(fs *flag.FlagSet, args []string, min, max int) (words []string, code int, ok bool) {
	words, err := parseFlags(fs, args)
	if err != nil {
		return nil, usageCode(err), false
	}
	if len(words) < min || max >= 0 && len(words) > max {
		fs.Usage()
		return nil, ExitUsage, false
	}
	return words, ExitOK, true
}
