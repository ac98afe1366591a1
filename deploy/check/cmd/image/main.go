// Command image builds toolgate's container images (worker, approver,
// toolctl) into an OCI image layout without a Docker daemon: see package
// image. Push them with skopeo or crane:
//
//	go run ./cmd/image --out ../../dist/oci --tag v1.2.3
//	skopeo copy oci:../../dist/oci:toolgate/worker:v1.2.3 docker://registry.example.com/platform/worker:v1.2.3
//
// Run it from deploy/check; it needs apt-get, apt-cache and dpkg-deb
// (Debian or Ubuntu) with current package lists (apt-get update).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/toolgate/toolgate/deploy/check/image"
	"github.com/toolgate/toolgate/deploy/check/release"
)

func main() {
	out := flag.String("out", "../../dist/oci", "OCI image layout to write")
	tag := flag.String("tag", "dev", "tag of the images: toolgate/NAME:TAG")
	repo := flag.String("repo", "../..", "the toolgate checkout to build")
	cache := flag.String("cache", "", "directory .deb files are downloaded to (default: a temporary one)")
	flag.Parse()
	epoch, _ := release.Head(*repo)
	if _, err := image.Build(context.Background(), image.Options{Repo: *repo, Out: *out, Tag: *tag, Cache: *cache, Epoch: epoch, Log: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
