// Command release builds a toolgate release into a directory: archives of
// worker, approver and toolctl for linux/amd64, linux/arm64 and
// darwin/arm64, a CycloneDX SBOM per platform and SHA256SUMS (see package
// release). From deploy/check:
//
//	go run ./cmd/release --version v1.2.3 --out ../../dist/release
//
// With no --version it is a snapshot named after the commit.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/toolgate/toolgate/deploy/check/release"
)

func main() {
	out := flag.String("out", "../../dist/release", "directory to write the release to (emptied first)")
	version := flag.String("version", "", "the release's version (a tag, v1.2.3); empty: a snapshot, 0.0.0-SNAPSHOT-<commit>")
	repo := flag.String("repo", "../..", "the toolgate checkout to build")
	flag.Parse()
	epoch, commit := release.Head(*repo)
	if *version == "" {
		*version = "0.0.0-SNAPSHOT-" + commit
	}
	arts, err := release.Build(context.Background(), release.Options{Repo: *repo, Out: *out, Version: *version, Epoch: epoch, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, a := range arts {
		fmt.Printf("%s  %s\n", a.SHA256, a.Name)
	}
}
