// Package check verifies what deploy/ ships, with the tools platform teams
// use but without a cluster, a registry or a Docker daemon: the Helm chart
// is linted and rendered by Helm's own packages (the code behind `helm
// lint` and `helm template`) and every rendered object is decoded strictly
// into the Kubernetes API types; the compose file is loaded by the
// compose-spec loader; the systemd units are checked by systemd-analyze;
// the container images are assembled from Debian packages and run.
//
// It is a module of its own so that Helm, the Kubernetes API and the
// compose loader stay out of toolgate's go.mod. .ci/run runs its tests.
package check
