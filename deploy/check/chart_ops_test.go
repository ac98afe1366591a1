package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// valuesFile writes a values file for one test.
func valuesFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// byKind indexes rendered objects by Kind/name.
func byKind(objs []runtime.Object) map[string]runtime.Object {
	m := map[string]runtime.Object{}
	for _, o := range objs {
		acc, ok := o.(interface{ GetName() string })
		if ok {
			m[o.GetObjectKind().GroupVersionKind().Kind+"/"+acc.GetName()] = o
		}
	}
	return m
}

// TestChartForOperators renders the production values and checks what
// operators rely on: the NATS dependency on the official chart's 2.x
// line; NetworkPolicies that let workers reach only NATS and DNS and the
// approver's page only the ingress controller; workers and approvers
// spread and prioritised; one ReadWriteMany workspace every worker mounts;
// alerts on metrics the code exports; the Grafana dashboard; helm test.
func TestChartForOperators(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ch.Metadata.Dependencies {
		if d.Name != "nats" {
			continue
		}
		c, err := semver.NewConstraint(d.Version)
		if err != nil {
			t.Fatal(err)
		}
		for v, want := range map[string]bool{"2.0.0": true, "2.12.1": true, "2.14.0": true, "1.3.9": false, "3.0.0": false} {
			if c.Check(semver.MustParse(v)) != want {
				t.Errorf("the nats dependency %q admits %s: %v, want %v", d.Version, v, !want, want)
			}
		}
	}
	objs := objects(t, render(t, []string{"../helm/production-values.yaml"}))
	m := byKind(objs)
	worker := m["Deployment/toolgate-worker"].(*appsv1.Deployment)
	approver := m["Deployment/toolgate-approver"].(*appsv1.Deployment)

	// NetworkPolicies.
	wnp, ok := m["NetworkPolicy/toolgate-worker"].(*networkingv1.NetworkPolicy)
	if !ok {
		t.Fatal("no NetworkPolicy of the workers")
	}
	if !selects(wnp.Spec.PodSelector.MatchLabels, worker) || selects(wnp.Spec.PodSelector.MatchLabels, approver) {
		t.Errorf("the workers' NetworkPolicy selects %v", wnp.Spec.PodSelector.MatchLabels)
	}
	if !slices.Contains(wnp.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(wnp.Spec.Egress) != 2 {
		t.Fatalf("the workers' egress: %v %+v, want NATS and DNS only", wnp.Spec.PolicyTypes, wnp.Spec.Egress)
	}
	nats := wnp.Spec.Egress[0]
	if len(nats.Ports) != 1 || nats.Ports[0].Port.IntValue() != 4222 || len(nats.To) != 1 || nats.To[0].PodSelector == nil ||
		nats.To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "nats" {
		t.Errorf("the workers' first egress rule %+v, want the NATS pods on 4222", nats)
	}
	if dns := wnp.Spec.Egress[1]; len(dns.Ports) != 2 || dns.Ports[0].Port.IntValue() != 53 {
		t.Errorf("the workers' second egress rule %+v, want DNS", dns)
	}
	anp, ok := m["NetworkPolicy/toolgate-approver"].(*networkingv1.NetworkPolicy)
	if !ok {
		t.Fatal("no NetworkPolicy of the approver")
	}
	page := anp.Spec.Ingress[0]
	if len(page.From) != 1 || page.From[0].NamespaceSelector == nil || page.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ingress-nginx" ||
		len(page.Ports) != 1 || page.Ports[0].Port.StrVal != "http" || !hasPort(approver, "http") {
		t.Errorf("the approver's page is reachable from %+v on %+v, want the ingress controller's namespace only", page.From, page.Ports)
	}
	for _, r := range append(anp.Spec.Ingress[1:], wnp.Spec.Ingress...) {
		if len(r.Ports) != 1 || r.Ports[0].Port.StrVal != "metrics" {
			t.Errorf("an ingress rule %+v opens more than the metrics port", r)
		}
	}

	// Scheduling, workspace.
	for _, d := range []*appsv1.Deployment{worker, approver} {
		pod := d.Spec.Template.Spec
		if pod.PriorityClassName == "" || len(pod.TopologySpreadConstraints) == 0 {
			t.Errorf("%s: priorityClassName %q, %d topology spread constraints", d.Name, pod.PriorityClassName, len(pod.TopologySpreadConstraints))
		}
		for _, c := range pod.TopologySpreadConstraints {
			if c.LabelSelector == nil || !selects(c.LabelSelector.MatchLabels, d) {
				t.Errorf("%s: spread constraint %+v does not select its own pods", d.Name, c)
			}
		}
	}
	pvc, ok := m["PersistentVolumeClaim/toolgate-workspace"].(*corev1.PersistentVolumeClaim)
	if !ok || !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
		t.Fatalf("the workspace claim: %+v, want ReadWriteMany", pvc)
	}
	if !slices.ContainsFunc(worker.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "workspace" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name
	}) {
		t.Errorf("the workers do not mount the shared workspace %s", pvc.Name)
	}

	// Alerts, on metrics the code exports.
	rule, ok := m["PrometheusRule/toolgate"].(*monitoringv1.PrometheusRule)
	if !ok {
		t.Fatal("no PrometheusRule")
	}
	// The OpenTelemetry instruments' names (toolgate.calls.waiting), as
	// Prometheus exposes them (toolgate_calls_waiting, counters _total).
	exported := map[string]bool{}
	for _, n := range regexp.MustCompile(`"(toolgate\.[a-z_.]+)"`).FindAllStringSubmatch(goSource(t), -1) {
		exported[strings.ReplaceAll(n[1], ".", "_")] = true
	}
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, metric := range regexp.MustCompile(`toolgate_[a-z_]+`).FindAllString(r.Expr.String(), -1) {
				if name := strings.TrimSuffix(strings.TrimSuffix(metric, "_total"), "_bucket"); !exported[name] {
					t.Errorf("alert %s uses %s, which no code exports", r.Alert, metric)
				}
			}
		}
	}
	for _, want := range []string{"ToolgateCallsWaiting", "ToolgateAuditPublishFailing", "ToolgateWorkersNotReady", "ToolgateDeadLetters"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s (alerts %v)", want, alerts)
		}
	}

	// The dashboard, as deploy/grafana/toolgate.json.
	cm, ok := m["ConfigMap/toolgate-dashboard"].(*corev1.ConfigMap)
	if !ok || cm.Labels["grafana_dashboard"] != "1" {
		t.Fatalf("dashboard ConfigMap %+v", cm)
	}
	want, err := os.ReadFile("../grafana/toolgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal([]byte(cm.Data["toolgate.json"]), &a); err != nil {
		t.Fatalf("the dashboard ConfigMap's JSON: %v", err)
	}
	_ = json.Unmarshal(want, &b)
	if ja, _ := json.Marshal(a); !bytes.Equal(ja, mustJSON(t, b)) {
		t.Error("the chart's dashboard (files/toolgate.json) differs from deploy/grafana/toolgate.json: copy it")
	}

	// helm test.
	pod, ok := m["Pod/toolgate-test-health"].(*corev1.Pod)
	if !ok || pod.Annotations["helm.sh/hook"] != "test" || len(pod.Spec.Containers) != 2 {
		t.Fatalf("helm test pod %+v", pod)
	}
	for _, c := range pod.Spec.Containers {
		if !slices.Contains(c.Args, "--healthcheck") || c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil {
			t.Errorf("helm test container %s: args %v", c.Name, c.Args)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// selects reports whether a selector matches d's pods.
func selects(sel map[string]string, d *appsv1.Deployment) bool {
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels))
}

// goSource is the text of toolgate's Go source (not its tests).
func goSource(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range []string{"../../internal", "../../pkg", "../../cmd"} {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			s, err := os.ReadFile(p)
			b.Write(s)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// scaledObject is KEDA's ScaledObject (keda.sh/v1alpha1), as much as the
// chart writes, decoded strictly: a field KEDA does not know fails.
type scaledObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   map[string]any    `json:"metadata"`
	Spec       scaledObjectSpec  `json:"spec"`
	Status     map[string]string `json:"status,omitempty"`
}

type scaledObjectSpec struct {
	ScaleTargetRef struct {
		Name       string `json:"name"`
		Kind       string `json:"kind,omitempty"`
		APIVersion string `json:"apiVersion,omitempty"`
	} `json:"scaleTargetRef"`
	MinReplicaCount *int32 `json:"minReplicaCount"`
	MaxReplicaCount *int32 `json:"maxReplicaCount"`
	PollingInterval *int32 `json:"pollingInterval"`
	CooldownPeriod  *int32 `json:"cooldownPeriod"`
	Advanced        struct {
		HorizontalPodAutoscalerConfig struct {
			Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
		} `json:"horizontalPodAutoscalerConfig"`
	} `json:"advanced"`
	Triggers []struct {
		Type     string            `json:"type"`
		Metadata map[string]string `json:"metadata"`
	} `json:"triggers"`
}

// documents splits a manifest into its YAML documents.
func documents(t *testing.T, manifest string) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			out = append(out, doc)
		}
	}
}

// TestChartKEDA: KEDA's ScaledObject on the calls stream's consumer, the
// alternative to the HPA: rendered instead of it (never both), the
// Deployment leaving replicas to it.
func TestChartKEDA(t *testing.T) {
	const account = "ABJHLOVMPA4CI6R5KLNGOB4GSLNIY7IOUPAJC4YFNDLQVIOBYQGUWVLA"
	keda := valuesFile(t, "worker:\n  autoscaling:\n    enabled: false\n    keda:\n      enabled: true\n      account: "+account+"\n")
	manifest := render(t, []string{"../helm/production-values.yaml", keda})
	var rest []string
	var so *scaledObject
	for _, doc := range documents(t, manifest) {
		if !bytes.Contains(doc, []byte("kind: ScaledObject")) {
			rest = append(rest, string(doc))
			continue
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		so = &scaledObject{}
		if err := dec.Decode(so); err != nil {
			t.Fatalf("ScaledObject: %v\n%s", err, doc)
		}
	}
	if so == nil || so.APIVersion != "keda.sh/v1alpha1" || len(so.Spec.Triggers) != 1 {
		t.Fatalf("ScaledObject %+v", so)
	}
	tr := so.Spec.Triggers[0]
	if tr.Type != "nats-jetstream" || tr.Metadata["stream"] != "TOOLGATE_CALLS" || tr.Metadata["consumer"] != "workers" ||
		tr.Metadata["account"] != account || tr.Metadata["lagThreshold"] == "" || tr.Metadata["natsServerMonitoringEndpoint"] == "" {
		t.Errorf("trigger %+v", tr)
	}
	m := byKind(objects(t, strings.Join(rest, "\n---\n")))
	if _, hpa := m["HorizontalPodAutoscaler/toolgate-worker"]; hpa {
		t.Error("both an HPA and a ScaledObject")
	}
	w := m["Deployment/toolgate-worker"].(*appsv1.Deployment)
	if so.Spec.ScaleTargetRef.Name != w.Name || w.Spec.Replicas != nil {
		t.Errorf("ScaledObject scales %q; the Deployment %s sets replicas %v", so.Spec.ScaleTargetRef.Name, w.Name, w.Spec.Replicas)
	}
	both := valuesFile(t, "worker:\n  autoscaling:\n    enabled: true\n    keda:\n      enabled: true\n      account: "+account+"\n")
	if _, err := tryRender(t, []string{"../helm/production-values.yaml", both}); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("HPA and KEDA together: %v", err)
	}
}

// TestChartKnobs: image digests pin the images; extra volumes, mounts and
// sidecars land in the pods; the workspace rule holds: several workers
// need a shared workspace, and a shared one needs a claim.
func TestChartKnobs(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	extras := valuesFile(t, `image:
  digests: {worker: "`+digest+`"}
worker:
  extraVolumes: [{name: cache, emptyDir: {}}]
  extraVolumeMounts: [{name: cache, mountPath: /cache}]
  sidecars: [{name: log-shipper, image: "registry.example.com/shipper:1", volumeMounts: [{name: cache, mountPath: /cache}, {name: tmp, mountPath: /tmp}, {name: state, mountPath: /var/lib/toolgate}, {name: creds, mountPath: /c}, {name: workspace, mountPath: /workspace}], resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 32Mi}}, securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, privileged: false, capabilities: {drop: [ALL]}}}]
approver:
  priorityClassName: high
`)
	m := byKind(objects(t, render(t, []string{extras})))
	w := m["Deployment/toolgate-worker"].(*appsv1.Deployment).Spec.Template.Spec
	if img := w.Containers[0].Image; img != "toolgate/worker:0.1.0@"+digest {
		t.Errorf("worker image %q, want it pinned by digest", img)
	}
	if img := m["Deployment/toolgate-approver"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Image; strings.Contains(img, "@") {
		t.Errorf("approver image %q pinned without a digest", img)
	}
	if len(w.Containers) != 2 || w.Containers[1].Name != "log-shipper" ||
		!slices.ContainsFunc(w.Volumes, func(v corev1.Volume) bool { return v.Name == "cache" }) ||
		!slices.ContainsFunc(w.Containers[0].VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/cache" }) {
		t.Errorf("extras: containers %d, volumes %+v", len(w.Containers), w.Volumes)
	}
	if m["Deployment/toolgate-approver"].(*appsv1.Deployment).Spec.Template.Spec.PriorityClassName != "high" {
		t.Error("approver.priorityClassName not set")
	}
	for name, c := range map[string]struct{ values, want string }{
		"several workers, each its own workspace": {"worker:\n  replicas: 3\n", "perPod with more than one worker"},
		"autoscaled, each its own workspace":      {"worker:\n  autoscaling: {enabled: true}\n", "perPod with more than one worker"},
		"shared without a claim":                  {"worker:\n  workspace: {mode: shared}\n", "existingClaim"},
	} {
		if _, err := tryRender(t, []string{valuesFile(t, c.values)}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	shared := valuesFile(t, "worker:\n  replicas: 3\n  workspace: {mode: shared, existingClaim: team-workspace}\n")
	w = byKind(objects(t, render(t, []string{shared})))["Deployment/toolgate-worker"].(*appsv1.Deployment).Spec.Template.Spec
	if !slices.ContainsFunc(w.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "team-workspace"
	}) {
		t.Errorf("three workers on an existing claim: volumes %+v", w.Volumes)
	}
}
