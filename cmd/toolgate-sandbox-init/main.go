// Command toolgate-sandbox-init is the first program of a sandboxed bash
// call: the worker shows it inside bubblewrap, where it drops root,
// restricts what the call may execute, and execs the command
// (pkg/sandboxinit). It is small so that a call pays little for it;
// a worker that does not find it beside itself, finds it installed so
// that someone else could replace it (it must be a regular file owned by
// root or the worker's user, writable by no one else, in a directory the
// same holds for), or sees it fail its start-up probe runs its own
// binary in its place, at the cost of a larger program's start.
//
// pkg/sandboxinit does the work in its init, which returns only for
// --version, answered here: the packages that read the build information
// (fmt, os, runtime/debug) are initialised after that init (Go
// initialises packages in import-path order as soon as their imports
// are), so a sandboxed call's start does not pay for them.
package main

import (
	"fmt"
	"os"

	"github.com/toolgate/toolgate/internal/version"
	_ "github.com/toolgate/toolgate/pkg/sandboxinit" // does the work in its init, under its name
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(version.Get().String("toolgate-sandbox-init"))
		return
	}
	os.Stderr.WriteString("toolgate-sandbox-init: run by the bash tool inside its sandbox, under the name toolgate-sandbox-init\n")
	os.Exit(2)
}
