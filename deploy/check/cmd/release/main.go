// Command release builds a toolgate release into a directory: archives of
// the commands (with LICENSE) for linux/amd64, linux/arm64 and
// darwin/arm64, a CycloneDX SBOM per platform, SLSA provenance, and
// SHA256SUMS signed with the release key (see package release). From
// deploy/check:
//
//	TOOLGATE_RELEASE_SIGNING_KEY=/secrets/release-key go run ./cmd/release --version v1.2.3 --out ../../dist/release
//
// A version v1.2.3 is a tag: the checkout must be that tag, clean, and
// every binary must report it; the key must be one deploy/release/allowed_signers
// lists. With no --version it is a snapshot named after the commit,
// signed only when a key is given.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/deploy/check/release"
)

func main() {
	out := flag.String("out", "../../dist/release", "directory to write the release to (emptied first)")
	version := flag.String("version", "", "the release's version (a tag, v1.2.3); empty: a snapshot, 0.0.0-SNAPSHOT-<commit>")
	repo := flag.String("repo", "../..", "the toolgate checkout to build")
	keyFile := flag.String("signing-key", os.Getenv("TOOLGATE_RELEASE_SIGNING_KEY"), "ed25519 private key file (OpenSSH or PKCS#8 PEM) signing SHA256SUMS (env TOOLGATE_RELEASE_SIGNING_KEY); required for a tag")
	allowed := flag.String("allowed-signers", "", "allowed_signers file the key must be listed in (default <repo>/deploy/release/allowed_signers)")
	flag.Parse()
	epoch, commit := release.Head(*repo)
	if *version == "" {
		*version = "0.0.0-SNAPSHOT-" + commit
	}
	o := release.Options{Repo: *repo, Out: *out, Version: *version, Epoch: epoch, Log: os.Stderr}
	if *keyFile != "" {
		key, err := os.ReadFile(*keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "release: --signing-key:", err)
			os.Exit(2)
		}
		o.SigningKey = key
		o.AllowedSigners = *allowed
		if o.AllowedSigners == "" {
			o.AllowedSigners = filepath.Join(*repo, "deploy/release/allowed_signers")
		}
	}
	arts, err := release.Build(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, a := range arts {
		fmt.Printf("%s  %s\n", a.SHA256, a.Name)
	}
}
