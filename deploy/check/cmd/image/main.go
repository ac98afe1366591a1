// Command image builds toolgate's container images (worker, approver,
// toolctl) into an OCI image layout without a Docker daemon: see package
// image. Push them with skopeo or crane:
//
//	go run ./cmd/image --out ../../dist/oci --tag v1.2.3
//	skopeo copy --all oci:../../dist/oci:toolgate/worker:v1.2.3 docker://registry.example.com/platform/worker:v1.2.3
//
// Run it from deploy/check; it needs apt-get, apt-cache and dpkg-deb
// (Debian or Ubuntu) with current package lists (apt-get update), and for
// the arm64 images arm64's (dpkg --add-architecture arm64). Each tag is
// an index of linux/amd64 and linux/arm64: skopeo copy --all pushes both.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/deploy/check/image"
	"github.com/toolgate/toolgate/deploy/check/release"
)

func main() {
	out := flag.String("out", "../../dist/oci", "OCI image layout to write")
	tag := flag.String("tag", "dev", "tag of the images: toolgate/NAME:TAG")
	repo := flag.String("repo", "../..", "the toolgate checkout to build")
	cache := flag.String("cache", "", "directory .deb files are downloaded to (default: a temporary one)")
	arches := flag.String("arches", runtime.GOARCH+",arm64", "the images' architectures, this machine's first; the others' Debian packages need dpkg --add-architecture ARCH && apt-get update")
	flag.Parse()
	var list []string
	for _, a := range strings.Split(*arches, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	epoch, _ := release.Head(*repo)
	if _, err := image.Build(context.Background(), image.Options{Repo: *repo, Out: *out, Tag: *tag, Cache: *cache, Epoch: epoch, Log: os.Stderr, Arches: list}); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
